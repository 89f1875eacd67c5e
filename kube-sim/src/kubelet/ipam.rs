//! Pod IP addresses on the loopback network.
//!
//! Every pod gets its own 127.x.y.z address so that a hook can reach `http://<podIP>:9091` and
//! hit exactly that pod's endpoint, as on a real cluster network. Linux routes the whole
//! 127.0.0.0/8 block to `lo`, so any of those addresses can be bound without configuration.
//!
//! Addresses are unique on the machine, at two levels:
//! - within a process, a registry: tests run several simulators in one process at once, and two
//!   pods sharing an address would steal each other's HTTP ports;
//! - across processes (a sandbox, the test binaries beside it), blocks: a process hands out
//!   addresses only in blocks 127.N.0.0/16 it holds, and it holds a block by binding a UDP socket on
//!   127.N.0.0 at [`BLOCK_CLAIM_PORT`]. The kernel refuses the same bind to a second process and
//!   frees it when the process exits, so a crashed simulator never leaves a stale claim.
//!
//! Pools without a start share one cursor per process, so an address a simulator released (its
//! pod deleted, or the simulator shut down) is handed out again only after the cursor has gone
//! round: a client still probing the old pod's address does not reach a new pod there.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::{LazyLock, Mutex, MutexGuard};

/// What this process holds.
#[derive(Default)]
struct Registry {
    /// Addresses held by any pool in this process.
    addresses: HashSet<u32>,
    /// Blocks (second octet) this process holds, with the socket that holds each.
    blocks: HashMap<u8, UdpSocket>,
    /// Where pools without a start take their next address.
    cursor: Option<u32>,
}

/// Whether a block is this process's to hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Held,
    /// Another process on the machine holds it.
    Foreign,
}

impl Registry {
    /// Holds `block` for this process unless another process does. A bind refused for any other
    /// reason than "in use" (no such address on an unusual machine) cannot tell the two apart, so
    /// the block is used as before blocks existed: unique within the process only.
    fn hold(&mut self, block: u8) -> Block {
        if self.blocks.contains_key(&block) {
            return Block::Held;
        }
        match UdpSocket::bind((Ipv4Addr::new(127, block, 0, 0), BLOCK_CLAIM_PORT)) {
            Ok(socket) => {
                self.blocks.insert(block, socket);
                Block::Held
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => Block::Foreign,
            Err(e) => {
                tracing::warn!(block = %Ipv4Addr::new(127, block, 0, 0), error = %e,
                    "cannot hold this pod address block against other processes");
                Block::Held
            }
        }
    }
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

fn registry() -> MutexGuard<'static, Registry> {
    // A panic while holding the lock cannot leave the registry inconsistent (single inserts and
    // removes), so a poisoned lock is still safe to use.
    REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Lowest address handed out: 127.1.0.0 (127.0.0.0/16 holds 127.0.0.1 and the node addresses).
const FIRST: u32 = u32::from_be_bytes([127, 1, 0, 0]);
/// Highest address handed out.
const LAST: u32 = u32::from_be_bytes([127, 255, 255, 254]);
/// UDP port of the socket on 127.N.0.0 by which a process holds the block 127.N.0.0/16.
pub(super) const BLOCK_CLAIM_PORT: u16 = 40404;

fn block_of(raw: u32) -> u8 {
    raw.to_be_bytes()[1]
}

/// The first address of the block after `raw`'s, wrapping to the first block.
fn next_block(raw: u32) -> u32 {
    match block_of(raw) {
        255 => FIRST,
        block => u32::from_be_bytes([127, block + 1, 0, 0]),
    }
}

/// Hands out unique pod addresses and takes them back when pods are gone.
#[derive(Debug)]
pub(super) struct PodIpPool {
    /// This pool's own cursor when it was given a start; `None` uses the process's.
    next: Option<u32>,
    mine: HashSet<u32>,
}

impl PodIpPool {
    /// A pool starting at `start` (or, when another process holds that block, at the next block
    /// that is free), or where the process's cursor is when `None`: a random 127.N.0.1 at first.
    pub(super) fn new(start: Option<Ipv4Addr>) -> Self {
        Self { next: start.map(|ip| u32::from(ip).clamp(FIRST, LAST)), mine: HashSet::new() }
    }

    /// Reserves the next free address, skipping network-looking (`.0`) and broadcast-looking
    /// (`.255`) ones so addresses read naturally, and blocks other processes hold. When every
    /// block is refused (something else bound the claim port on every address, as a wildcard
    /// bind does), blocks are ignored: unique within the process only, as before they existed.
    /// `None` only when every address is taken.
    pub(super) fn allocate(&mut self) -> Option<Ipv4Addr> {
        let mut registry = registry();
        let start = self.next.or(registry.cursor).unwrap_or_else(random_start);
        let found = match next_free(&mut registry, start, Claims::Respected) {
            Some(found) => Some(found),
            None if registry.addresses.len() < (LAST - FIRST) as usize => {
                tracing::warn!(
                    port = BLOCK_CLAIM_PORT,
                    "every pod address block is refused; \
                    pod addresses are unique in this process only"
                );
                next_free(&mut registry, start, Claims::Ignored)
            }
            None => None,
        };
        let (raw, next) = found?;
        match self.next {
            Some(_) => self.next = Some(next),
            None => registry.cursor = Some(next),
        }
        registry.addresses.insert(raw);
        self.mine.insert(raw);
        Some(Ipv4Addr::from(raw))
    }

    /// Reserves a specific address (a pod adopted with an IP already in its status). Returns
    /// false when a pool of this process holds it. The pod keeps its address even when its block
    /// is another process's (it cannot move), but the block is held when it is free.
    pub(super) fn claim(&mut self, ip: Ipv4Addr) -> bool {
        let raw = u32::from(ip);
        if self.mine.contains(&raw) {
            return true;
        }
        let mut registry = registry();
        if registry.addresses.contains(&raw) {
            return false;
        }
        if (FIRST..=LAST).contains(&raw) && registry.hold(block_of(raw)) == Block::Foreign {
            tracing::warn!(%ip, "a pod keeps an address in a block another process on this machine holds");
        }
        registry.addresses.insert(raw);
        self.mine.insert(raw);
        true
    }

    /// Returns an address to the pool once its pod no longer exists.
    pub(super) fn release(&mut self, ip: Ipv4Addr) {
        let raw = u32::from(ip);
        if self.mine.remove(&raw) {
            registry().addresses.remove(&raw);
        }
    }
}

/// Whether other processes' block claims are respected (always, unless every block is refused).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Claims {
    Respected,
    Ignored,
}

/// The first free address from `start` on, and where the search goes on after it.
fn next_free(registry: &mut Registry, start: u32, claims: Claims) -> Option<(u32, u32)> {
    let mut next = start;
    let mut addresses_tried: u32 = 0;
    let mut blocks_skipped: u32 = 0;
    while addresses_tried <= LAST - FIRST && blocks_skipped <= 255 {
        let candidate = next;
        if claims == Claims::Respected && registry.hold(block_of(candidate)) == Block::Foreign {
            blocks_skipped += 1;
            next = next_block(candidate);
            continue;
        }
        addresses_tried += 1;
        next = if candidate >= LAST { FIRST } else { candidate + 1 };
        let last_octet = candidate & 0xff;
        if last_octet != 0 && last_octet != 255 && !registry.addresses.contains(&candidate) {
            return Some((candidate, next));
        }
    }
    None
}

/// A random 127.N.0.1, so that processes started at once rarely try the same block first.
fn random_start() -> u32 {
    let second_octet = 1 + (RandomState::new().hash_one("kube-sim pod ip") % 254) as u8;
    u32::from_be_bytes([127, second_octet, 0, 1])
}

impl Drop for PodIpPool {
    fn drop(&mut self) {
        let mut registry = registry();
        for raw in self.mine.drain() {
            registry.addresses.remove(&raw);
        }
    }
}

/// The InternalIP of the `index`-th node (1-based): 127.0.100.1, 127.0.100.2, … then
/// 127.0.101.1 after 250 nodes. Nothing binds these addresses; they only need to be distinct
/// from pod addresses and 127.0.0.1.
pub(super) fn node_ip(index: u32) -> Ipv4Addr {
    let zero_based = index.saturating_sub(1);
    let third = (100 + zero_based / 250).min(255) as u8;
    let fourth = (zero_based % 250 + 1) as u8;
    Ipv4Addr::new(127, 0, third, fourth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_unique_and_skip_special_octets() {
        let mut pool = PodIpPool::new(Some(Ipv4Addr::new(127, 200, 0, 250)));
        let ips: Vec<_> = (0..10).map(|_| pool.allocate().unwrap()).collect();
        let unique: HashSet<_> = ips.iter().collect();
        assert_eq!(unique.len(), ips.len());
        assert_eq!(ips[0], Ipv4Addr::new(127, 200, 0, 250));
        for ip in &ips {
            let [a, b, _, d] = ip.octets();
            assert_eq!(a, 127);
            assert_ne!(b, 0);
            assert!(d != 0 && d != 255, "{ip}");
        }
        assert!(ips.contains(&Ipv4Addr::new(127, 200, 1, 1)));
    }

    #[test]
    fn two_pools_never_share_an_address() {
        let start = Some(Ipv4Addr::new(127, 201, 0, 1));
        let mut a = PodIpPool::new(start);
        let mut b = PodIpPool::new(start);
        let from_a: HashSet<_> = (0..50).map(|_| a.allocate().unwrap()).collect();
        let from_b: HashSet<_> = (0..50).map(|_| b.allocate().unwrap()).collect();
        assert!(from_a.is_disjoint(&from_b));
    }

    #[test]
    fn released_addresses_come_back_and_claims_respect_owners() {
        let mut a = PodIpPool::new(Some(Ipv4Addr::new(127, 202, 0, 1)));
        let ip = a.allocate().unwrap();
        let mut b = PodIpPool::new(Some(Ipv4Addr::new(127, 202, 0, 1)));
        assert!(!b.claim(ip), "held by a");
        assert!(a.claim(ip), "a already owns it");
        a.release(ip);
        assert!(b.claim(ip));
        drop(b);
        assert!(a.claim(ip), "dropping a pool frees its addresses");
    }

    /// Another simulator on the machine (a sandbox, another test binary) holds 127.203.0.0/16:
    /// a pool asked to start there must not hand out its addresses, or two pods in two processes
    /// would share an IP and one would answer for the other's endpoint.
    #[test]
    fn a_block_held_by_another_process_is_skipped() {
        let (block, foreign) = hold_a_free_block_like_another_process();
        let mut pool = PodIpPool::new(Some(Ipv4Addr::new(127, block, 0, 1)));
        let ip = pool.allocate().unwrap();
        assert_ne!(ip.octets()[1], block, "{ip} is in a block another process holds");
        drop(foreign);
    }

    /// Whatever block the pool ends up in (the suggested one may be taken between the look and the
    /// pool's own bind, by another test of this binary or a simulator of the end-to-end suite), a
    /// second process cannot take it while the pool lives.
    #[test]
    fn a_pool_holds_its_block_against_other_processes() {
        let (block, probe) = hold_a_free_block_like_another_process();
        drop(probe);
        let mut pool = PodIpPool::new(Some(Ipv4Addr::new(127, block, 0, 1)));
        let ip = pool.allocate().unwrap();
        let held = ip.octets()[1];
        let other_process = std::net::UdpSocket::bind((Ipv4Addr::new(127, held, 0, 0), BLOCK_CLAIM_PORT));
        assert_eq!(other_process.unwrap_err().kind(), std::io::ErrorKind::AddrInUse, "{ip}");
    }

    /// Pools without a start share one cursor, so an address a shut-down simulator released is
    /// not handed to the next simulator of the process while a client may still probe it.
    #[test]
    fn released_addresses_are_not_handed_out_again_soon() {
        let mut first = PodIpPool::new(None);
        let ip = first.allocate().unwrap();
        drop(first);
        let mut second = PodIpPool::new(None);
        let next: Vec<_> = (0..100).map(|_| second.allocate().unwrap()).collect();
        assert!(!next.contains(&ip), "{ip} came back at once");
    }

    /// A block no simulator holds now, held by a socket of this process that is not in the registry, as another
    /// process would hold it. The search binds rather than looks, so no other test or simulator can take the block
    /// between the look and the hold (a look-then-bind failed a run when the end-to-end suite's simulators and this
    /// binary's tests raced for the same block).
    fn hold_a_free_block_like_another_process() -> (u8, std::net::UdpSocket) {
        (150..=254u8)
            .rev()
            .find_map(|b| {
                std::net::UdpSocket::bind((Ipv4Addr::new(127, b, 0, 0), BLOCK_CLAIM_PORT)).ok().map(|s| (b, s))
            })
            .expect("a free block")
    }

    #[test]
    fn random_start_is_outside_the_node_block() {
        for _ in 0..20 {
            let mut pool = PodIpPool::new(None);
            let ip = pool.allocate().unwrap();
            assert_eq!(ip.octets()[0], 127);
            assert_ne!(ip.octets()[1], 0);
        }
    }

    #[test]
    fn node_addresses() {
        assert_eq!(node_ip(1), Ipv4Addr::new(127, 0, 100, 1));
        assert_eq!(node_ip(3), Ipv4Addr::new(127, 0, 100, 3));
        assert_eq!(node_ip(251), Ipv4Addr::new(127, 0, 101, 1));
    }
}
