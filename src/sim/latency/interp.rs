//! Interpolation in a step profile's tables: linear along every axis between its points (so a
//! table's own points come back exactly), and beyond its ends by each table's rule
//! ([`Beyond`]). `scripts/import-aiconfigurator` checks its grids against this rule.

/// What a curve does past its last point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beyond {
    /// On along the line through its last two points (memory-bound work, linear in its size).
    Linear,
    /// In proportion to the axis from the last point (a GEMM past its sweep holds its
    /// throughput, as AIConfigurator's utilisation hold does).
    Proportional,
    /// In proportion to the axis squared from the last point (causal attention's score pairs).
    Quadratic,
}

/// One axis: its points, strictly increasing and positive (checked when a profile loads).
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    points: Vec<f64>,
    beyond: Beyond,
}

/// Where a value falls on an axis: the lower point's index, and the upper point's weight (above
/// 1 past the end under [`Beyond::Linear`]), or a factor on the last point's value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    Between(usize, f64),
    Scaled(f64),
}

impl Axis {
    pub fn new(points: Vec<f64>, beyond: Beyond) -> Axis {
        Axis { points, beyond }
    }

    pub fn points(&self) -> &[f64] {
        &self.points
    }

    fn place(&self, x: f64) -> Place {
        let p = &self.points;
        let n = p.len();
        if n == 1 {
            return Place::Scaled(1.0);
        }
        let last = p[n - 1];
        if x > last {
            return match self.beyond {
                Beyond::Linear => Place::Between(n - 2, (x - p[n - 2]) / (last - p[n - 2])),
                Beyond::Proportional => Place::Scaled(x / last),
                Beyond::Quadratic => Place::Scaled((x / last) * (x / last)),
            };
        }
        // Below the first point: held at it (no table here starts above the smallest shape a
        // step can have but by a rounding).
        if x <= p[0] {
            return Place::Between(0, 0.0);
        }
        // The last point itself falls in the last interval, at its upper end.
        let i = (p.partition_point(|&q| q <= x) - 1).min(n - 2);
        Place::Between(i, (x - p[i]) / (p[i + 1] - p[i]))
    }
}

/// A curve: values at an axis's points.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub axis: Axis,
    pub values: Vec<f64>,
}

impl Curve {
    pub fn at(&self, x: f64) -> f64 {
        match self.axis.place(x) {
            Place::Between(i, w) => self.values[i] + (self.values[i + 1] - self.values[i]) * w,
            Place::Scaled(f) => self.values[self.values.len() - 1] * f,
        }
    }
}

/// A surface: values over two axes, row-major (`values[i][j]` at `rows[i]`, `cols[j]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Surface {
    pub rows: Axis,
    pub cols: Axis,
    pub values: Vec<Vec<f64>>,
}

impl Surface {
    pub fn at(&self, x: f64, y: f64) -> f64 {
        // Along the columns first, in the one or two rows that count.
        let along = |i: usize| -> f64 {
            let v = &self.values[i];
            match self.cols.place(y) {
                Place::Between(j, w) => v[j] + (v[j + 1] - v[j]) * w,
                Place::Scaled(f) => v[v.len() - 1] * f,
            }
        };
        match self.rows.place(x) {
            Place::Between(i, w) => along(i) + (along(i + 1) - along(i)) * w,
            Place::Scaled(f) => along(self.values.len() - 1) * f,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(p: &[f64], b: Beyond) -> Axis {
        Axis::new(p.to_vec(), b)
    }

    #[test]
    fn points_come_back_and_lines_between_them() {
        let c = Curve {
            axis: axis(&[1.0, 2.0, 4.0], Beyond::Linear),
            values: vec![10.0, 20.0, 60.0],
        };
        assert_eq!(c.at(2.0), 20.0);
        assert_eq!(c.at(3.0), 40.0);
        assert_eq!(c.at(4.0), 60.0);
        assert_eq!(c.at(0.5), 10.0);
        assert_eq!(c.at(6.0), 100.0); // on along 20 per unit
        let p = Curve {
            axis: axis(&[1.0, 2.0, 4.0], Beyond::Proportional),
            values: vec![10.0, 20.0, 60.0],
        };
        assert_eq!(p.at(8.0), 120.0);
        let q = Curve {
            axis: axis(&[1.0, 2.0, 4.0], Beyond::Quadratic),
            values: vec![10.0, 20.0, 60.0],
        };
        assert_eq!(q.at(8.0), 240.0);
    }

    #[test]
    fn a_surface_is_bilinear() {
        let s = Surface {
            rows: axis(&[1.0, 3.0], Beyond::Linear),
            cols: axis(&[10.0, 20.0], Beyond::Linear),
            values: vec![vec![1.0, 2.0], vec![5.0, 10.0]],
        };
        assert_eq!(s.at(1.0, 10.0), 1.0);
        assert_eq!(s.at(3.0, 20.0), 10.0);
        // Middle: rows at y=15 are 1.5 and 7.5; halfway between them 4.5.
        assert_eq!(s.at(2.0, 15.0), 4.5);
        // Past both ends along the lines: y=30 gives 3 and 15, x=5 on to 27.
        assert_eq!(s.at(5.0, 30.0), 27.0);
    }
}
