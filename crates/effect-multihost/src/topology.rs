//! Hosts as network namespaces, joined by veth pairs to a bridge that lives
//! in a namespace of its own (so nothing is added to the machine's own
//! network), and partitions between them with iptables.

use std::fs::File;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Arc;
use std::thread;

use anyhow::{Context, bail};

/// The subnet every host has an address in.
const SUBNET: [u8; 3] = [10, 77, 0];

/// One host: a network namespace with one interface on the bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Host {
    /// The short name (`db1`, `w2`).
    pub(crate) name: String,
    /// The namespace's name (`mh<pid>-db1`).
    pub(crate) ns: String,
    pub(crate) addr: Ipv4Addr,
}

/// Which packets a partition drops, as seen from the partitioned host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Nothing passes either way.
    Both,
    /// The host's packets reach the peer; the peer's answers are dropped:
    /// a request runs, and its answer never arrives.
    Inbound,
}

/// The namespaces of one run; dropping it deletes them.
#[derive(Debug)]
pub(crate) struct Network {
    hub: String,
    hosts: Vec<Host>,
}

impl Network {
    /// Creates the hub with its bridge and one namespace per `(name, last
    /// octet)`, after deleting what an earlier run that died left behind.
    pub(crate) fn create(hosts: &[(&str, u8)]) -> anyhow::Result<Network> {
        remove_stale()?;
        let prefix = format!("mh{}", std::process::id());
        let hub = format!("{prefix}-hub");
        let mut network = Network {
            hub: hub.clone(),
            hosts: Vec::new(),
        };
        ip(&["netns", "add", &hub])?;
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for &(name, octet) in hosts {
            let ns = format!("{prefix}-{name}");
            let addr = Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], octet);
            ip(&["netns", "add", &ns])?;
            let port = format!("h-{name}");
            ip(&[
                "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &hub, "link", "set", &port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            network.hosts.push(Host {
                name: name.to_owned(),
                ns,
                addr,
            });
        }
        Ok(network)
    }

    /// The host named `name`.
    pub(crate) fn host(&self, name: &str) -> anyhow::Result<&Host> {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .with_context(|| format!("no host named {name}"))
    }

    /// Drops `host`'s traffic with `peer` (see [`Direction`]).
    pub(crate) fn partition(
        &self,
        host: &Host,
        peer: Ipv4Addr,
        direction: Direction,
    ) -> anyhow::Result<()> {
        let peer = peer.to_string();
        iptables(&host.ns, &["-A", "INPUT", "-s", &peer, "-j", "DROP"])?;
        if direction == Direction::Both {
            iptables(&host.ns, &["-A", "OUTPUT", "-d", &peer, "-j", "DROP"])?;
        }
        Ok(())
    }

    /// Removes every partition of `host`.
    pub(crate) fn heal(&self, host: &Host) -> anyhow::Result<()> {
        iptables(&host.ns, &["-F", "INPUT"])?;
        iptables(&host.ns, &["-F", "OUTPUT"])
    }

    /// Removes every partition of every host.
    pub(crate) fn heal_all(&self) -> anyhow::Result<()> {
        for host in &self.hosts {
            self.heal(host)?;
        }
        Ok(())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for host in &self.hosts {
            let _ = ip(&["netns", "delete", &host.ns]);
        }
        let _ = ip(&["netns", "delete", &self.hub]);
    }
}

/// Runs `work` on a thread that entered `ns` first: the sockets it creates
/// belong to that namespace for their whole life, whichever thread uses
/// them later, and the threads it spawns start in it.
pub(crate) fn in_namespace<T, F>(ns: &str, work: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> anyhow::Result<T> + Send + 'static,
{
    let path = format!("/var/run/netns/{ns}");
    let file = Arc::new(File::open(&path).with_context(|| format!("opening {path}"))?);
    thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&*file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .context("setns into the namespace")?;
        work()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("a thread inside namespace {ns} panicked"))?
}

/// Deletes the namespaces of earlier runs whose harness process is gone.
fn remove_stale() -> anyhow::Result<()> {
    let output = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .context("running ip netns list")?;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix("mh")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            // Its servers and workers outlived it: they are the processes
            // inside its namespaces, and nothing else is.
            if let Ok(pids) = Command::new("ip").args(["netns", "pids", name]).output() {
                for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                    if let Ok(pid) = pid.parse() {
                        crate::process::kill9(pid);
                    }
                }
            }
            let _ = ip(&["netns", "delete", name]);
        }
    }
    Ok(())
}

pub(crate) fn ip(args: &[&str]) -> anyhow::Result<()> {
    run("ip", args)
}

fn iptables(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut all = vec!["netns", "exec", ns, "iptables", "-w"];
    all.extend_from_slice(args);
    run("ip", &all)
}

fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !output.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}
