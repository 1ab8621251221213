//! One cluster configuration: its [`Topology`] — colocated replicas behind a router, or prefill
//! and decode instances apart behind a prefill router — and the routers' settings. What only one
//! topology takes lives in its variant, and what no run could take is refused when the spec is
//! built.

use super::pd::Disagg;
use super::router::{RouterConfig, RouterKind};
use crate::sim::engine::config::ConfigError;

/// One cluster configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterSpec {
    pub topology: Topology,
    pub router_cfg: RouterConfig,
}

/// How a cluster's instances share the work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Topology {
    /// Replicas that each prefill and decode, behind one router.
    Colocated(Colocated),
    /// Prefill and decode on separate instances ([`super::pd`]).
    Disaggregated(Disaggregated),
}

/// Colocated replicas and their router; built by [`Colocated::new`], which refuses a router
/// that only disaggregated serving has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Colocated {
    replicas: usize,
    router: RouterKind,
}

impl Colocated {
    pub fn new(replicas: usize, router: RouterKind) -> Result<Colocated, ConfigError> {
        if router == RouterKind::Conductor {
            return Err(ConfigError::ConductorColocated);
        }
        Ok(Colocated { replicas, router })
    }

    pub fn replicas(&self) -> usize {
        self.replicas
    }

    pub fn router(&self) -> RouterKind {
        self.router
    }
}

/// A disaggregated layout and the router of its prefill instances (any router; the Conductor
/// is Mooncake's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Disaggregated {
    pub layout: Disagg,
    pub prefill_router: RouterKind,
}

impl ClusterSpec {
    /// `replicas` colocated behind `router`; an error for the Conductor.
    pub fn colocated(
        replicas: usize,
        router: RouterKind,
        router_cfg: RouterConfig,
    ) -> Result<ClusterSpec, ConfigError> {
        Ok(ClusterSpec {
            topology: Topology::Colocated(Colocated::new(replicas, router)?),
            router_cfg,
        })
    }

    /// The layout `layout` with its prefill instances behind `prefill_router`.
    pub fn disaggregated(
        layout: Disagg,
        prefill_router: RouterKind,
        router_cfg: RouterConfig,
    ) -> ClusterSpec {
        ClusterSpec {
            topology: Topology::Disaggregated(Disaggregated {
                layout,
                prefill_router,
            }),
            router_cfg,
        }
    }

    /// Every instance: the replicas, or the prefill and the decode instances.
    pub fn replicas(&self) -> usize {
        match &self.topology {
            Topology::Colocated(c) => c.replicas,
            Topology::Disaggregated(d) => d.layout.prefill_replicas + d.layout.decode_replicas,
        }
    }

    /// The router requests meet first: the replicas' router, or the prefill router.
    pub fn router(&self) -> RouterKind {
        match &self.topology {
            Topology::Colocated(c) => c.router,
            Topology::Disaggregated(d) => d.prefill_router,
        }
    }

    /// The disaggregated layout; `None`: colocated.
    pub fn disagg(&self) -> Option<&Disagg> {
        match &self.topology {
            Topology::Colocated(_) => None,
            Topology::Disaggregated(d) => Some(&d.layout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conductor_is_refused_colocated() {
        let e = ClusterSpec::colocated(2, RouterKind::Conductor, RouterConfig::default());
        let e = e.unwrap_err();
        assert_eq!(e, ConfigError::ConductorColocated);
        assert!(e.to_string().contains("needs disaggregated serving"));
        let ok = ClusterSpec::colocated(2, RouterKind::KvAware, RouterConfig::default()).unwrap();
        assert_eq!(
            (ok.replicas(), ok.router(), ok.disagg()),
            (2, RouterKind::KvAware, None)
        );
    }
}
