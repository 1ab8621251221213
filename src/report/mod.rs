//! Output shared by every command: aligned text tables and SVG line plots.

mod plot;
mod table;

pub use plot::{line_plot, Axis, Series};
pub use table::Table;
