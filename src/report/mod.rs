//! Output shared by every command: aligned text tables (also as HTML), SVG line plots, and
//! llm-d's benchmark report ([`llmd`]).

pub mod llmd;
mod plot;
mod table;

pub use plot::{line_plot, line_plot_with, Axis, Band, Extras, Mark, Series};
pub use table::{escape_html, Table};
