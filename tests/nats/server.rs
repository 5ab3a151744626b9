//! The test server (`tests/support/nats_server.rs`), plus what only the tests need:
//! restarts and clusters.

#[path = "../support/nats_server.rs"]
mod local;

pub use local::{free_port, Server};

impl Server {
    /// Starts the server again on the same port and store (after [`kill`](Self::kill)).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

/// Three (or `n`) servers with JetStream, routed into one cluster on loopback.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Starts `n` servers named `n0`, `n1`, ... in cluster `weir`.
    pub fn start(n: usize) -> Cluster {
        let routes: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let route_list = routes
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = routes
            .iter()
            .enumerate()
            .map(|(i, port)| {
                Server::start_with(
                    &format!("n{i}"),
                    vec![
                        "--cluster_name".into(),
                        "weir".into(),
                        "--cluster".into(),
                        format!("nats://127.0.0.1:{port}"),
                        "--routes".into(),
                        route_list.clone(),
                    ],
                )
            })
            .collect();
        Cluster { nodes }
    }

    /// Every node's client URL (what a client connects with).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// The node named `name`.
    pub fn node(&mut self, name: &str) -> &mut Server {
        self.nodes
            .iter_mut()
            .find(|node| node.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }
}
