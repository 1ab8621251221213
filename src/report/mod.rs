//! Output shared by every command: aligned text tables (also as HTML) and SVG line plots.

mod plot;
mod table;

pub use plot::{line_plot, line_plot_with, Axis, Band, Extras, Mark, Series};
pub use table::{escape_html, Table};
