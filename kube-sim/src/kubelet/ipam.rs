//! Pod IP addresses on the loopback network.
//!
//! Every pod gets its own 127.x.y.z address so that a hook can reach `http://<podIP>:9091` and
//! hit exactly that pod's endpoint, as on a real cluster network. Linux routes the whole
//! 127.0.0.0/8 block to `lo`, so any of those addresses can be bound without configuration.
//!
//! Addresses are reserved in a process-wide registry: tests run several simulators in one process
//! at once, and two pods sharing an address would steal each other's HTTP ports. The default
//! starting point is random for the same reason across processes (a sandbox and a test run).

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::net::Ipv4Addr;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// Addresses held by any pool in this process.
static RESERVED: LazyLock<Mutex<HashSet<u32>>> = LazyLock::new(Mutex::default);

fn reserved() -> MutexGuard<'static, HashSet<u32>> {
    // A panic while holding the lock cannot leave the set inconsistent (single inserts and
    // removes), so a poisoned lock is still safe to use.
    RESERVED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Lowest address handed out: 127.1.0.0 (127.0.0.0/16 holds 127.0.0.1 and the node addresses).
const FIRST: u32 = u32::from_be_bytes([127, 1, 0, 0]);
/// Highest address handed out.
const LAST: u32 = u32::from_be_bytes([127, 255, 255, 254]);

/// Hands out unique pod addresses and takes them back when pods are gone.
#[derive(Debug)]
pub struct PodIpPool {
    next: u32,
    mine: HashSet<u32>,
}

impl PodIpPool {
    /// A pool starting at `start`, or at a random 127.N.0.1 when `None`.
    pub fn new(start: Option<Ipv4Addr>) -> Self {
        let next = match start {
            Some(ip) => u32::from(ip).clamp(FIRST, LAST),
            None => {
                let second_octet = 1 + (RandomState::new().hash_one("kube-sim pod ip") % 254) as u8;
                u32::from_be_bytes([127, second_octet, 0, 1])
            }
        };
        Self { next, mine: HashSet::new() }
    }

    /// Reserves the next free address, skipping network-looking (`.0`) and broadcast-looking
    /// (`.255`) ones so addresses read naturally. `None` only when 16 million are in use.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        let mut registry = reserved();
        for _ in 0..=(LAST - FIRST) {
            let candidate = self.next;
            self.next = if candidate >= LAST { FIRST } else { candidate + 1 };
            let last_octet = candidate & 0xff;
            if last_octet == 0 || last_octet == 255 || registry.contains(&candidate) {
                continue;
            }
            registry.insert(candidate);
            self.mine.insert(candidate);
            return Some(Ipv4Addr::from(candidate));
        }
        None
    }

    /// Reserves a specific address (a pod adopted with an IP already in its status). Returns
    /// false when someone else holds it.
    pub fn claim(&mut self, ip: Ipv4Addr) -> bool {
        let raw = u32::from(ip);
        if self.mine.contains(&raw) {
            return true;
        }
        let mut registry = reserved();
        if registry.contains(&raw) {
            return false;
        }
        registry.insert(raw);
        self.mine.insert(raw);
        true
    }

    /// Returns an address to the pool once its pod no longer exists.
    pub fn release(&mut self, ip: Ipv4Addr) {
        let raw = u32::from(ip);
        if self.mine.remove(&raw) {
            reserved().remove(&raw);
        }
    }
}

impl Drop for PodIpPool {
    fn drop(&mut self) {
        let mut registry = reserved();
        for raw in self.mine.drain() {
            registry.remove(&raw);
        }
    }
}

/// The InternalIP of the `index`-th node (1-based): 127.0.100.1, 127.0.100.2, … then
/// 127.0.101.1 after 250 nodes. Nothing binds these addresses; they only need to be distinct
/// from pod addresses and 127.0.0.1.
pub fn node_ip(index: u32) -> Ipv4Addr {
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
