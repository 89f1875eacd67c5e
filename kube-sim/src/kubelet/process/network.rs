//! The pod network of process containers. On a cluster every pod has a network namespace of its own, so a
//! program listening on the wildcard address (`--metrics-address=0.0.0.0:8080`, as the Helm chart and most images
//! write it) takes the port on its pod's IP only. Process containers share this host's network namespace and differ
//! only by their loopback pod IP, so a wildcard listener would take the port on every address of the host: the
//! second replica of a Deployment (or any other pod, or a test) listening on that port would fail with "Address
//! already in use". So a wildcard host in a listen address on the container's command line (`0.0.0.0:PORT`,
//! `[::]:PORT`, or an argument that is exactly `0.0.0.0` or `::`) is given to the program as its pod IP, which is
//! what it would reach on a cluster. A program that listens on the wildcard without saying so on its command line
//! (a default compiled in) still takes the port on every address (a difference listed in the book's kube-sim
//! differences page).

use std::net::Ipv4Addr;

/// `arg` with every wildcard listen host replaced by `pod_ip`.
pub(super) fn bind_pod_ip(arg: &str, pod_ip: Ipv4Addr) -> String {
    if arg == "0.0.0.0" || arg == "::" || arg == "[::]" {
        return pod_ip.to_string();
    }
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while !rest.is_empty() {
        let wildcard = ["0.0.0.0:", "[::]:"].into_iter().find(|w| {
            rest.starts_with(w) && rest[w.len()..].starts_with(|c: char| c.is_ascii_digit()) && starts_host(arg, rest)
        });
        if let Some(w) = wildcard {
            out.push_str(&pod_ip.to_string());
            out.push(':');
            rest = &rest[w.len()..];
        } else {
            let mut chars = rest.chars();
            if let Some(c) = chars.next() {
                out.push(c);
            }
            rest = chars.as_str();
        }
    }
    out
}

/// Whether `rest` (a suffix of `arg`) starts a host: at the start of the argument or after `=`, `/` or `,`
/// (`--flag=0.0.0.0:80`, `http://0.0.0.0:80`), not inside a longer address such as `10.0.0.0:80`.
fn starts_host(arg: &str, rest: &str) -> bool {
    let at = arg.len() - rest.len();
    at == 0 || arg[..at].ends_with(['=', '/', ','])
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: Ipv4Addr = Ipv4Addr::new(127, 190, 0, 4);

    #[test]
    fn wildcard_listen_hosts_become_the_pod_ip() {
        assert_eq!(bind_pod_ip("--metrics-address=0.0.0.0:8080", IP), "--metrics-address=127.190.0.4:8080");
        assert_eq!(bind_pod_ip("0.0.0.0:9443", IP), "127.190.0.4:9443");
        assert_eq!(bind_pod_ip("--listen=[::]:80", IP), "--listen=127.190.0.4:80");
        assert_eq!(bind_pod_ip("http://0.0.0.0:80/x", IP), "http://127.190.0.4:80/x");
        assert_eq!(bind_pod_ip("0.0.0.0", IP), "127.190.0.4");
        assert_eq!(bind_pod_ip("::", IP), "127.190.0.4");
    }

    #[test]
    fn everything_else_is_left_alone() {
        for arg in
            ["--web-deny-cidr=0.0.0.0/0", "10.0.0.0:80", "--a=110.0.0.0:5", "--x=0.0.0.0:", "plain", "", "é0.0.0.0:1"]
        {
            assert_eq!(bind_pod_ip(arg, IP), arg);
        }
    }
}
