//! `kubectl gd get NAME --watch` on a pseudo-terminal: colour and symbols, and a change on the server redraws the
//! view in place (cursor home, each line cleared, the rest of the screen cleared) — driven by watches, against a
//! kube-sim API server holding a GameDeployment whose status the test changes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::api::GameDeployment;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

const NAME: &str = "watched";
const DEADLINE: Duration = Duration::from_secs(90);

const GD: &str = include_str!("manifests/watched-gamedeployment.yaml");

/// A pseudo-terminal: the child gets the terminal side as stdout/stderr, the test reads the other side.
struct Pty {
    master: std::fs::File,
    terminal: std::fs::File,
}

fn open_pty() -> Pty {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().expect("pts path"))
        .expect("terminal side opens");
    let size = rustix::termios::Winsize { ws_row: 50, ws_col: 160, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(&terminal, size).expect("window size");
    Pty { master: std::fs::File::from(master), terminal }
}

/// Everything the child wrote, read on a thread (reads block).
fn capture(mut master: std::fs::File) -> Arc<Mutex<Vec<u8>>> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // EIO once the child closed the terminal side.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    out
}

async fn wait_output(out: &Arc<Mutex<Vec<u8>>>, what: &str, want: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
        if want(&text) {
            return text;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}; the terminal shows:\n{text:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The distinct times since the start (`0s`, `1m2s`) of the frames of `text` that draw `line` in place: a carriage
/// return, `[time] `, the line, the rest of the line cleared.
fn elapsed_stamps(text: &str, line: &str) -> std::collections::BTreeSet<String> {
    let tail = format!("] {line}\x1b[K");
    text.split('\r')
        .filter_map(|frame| frame.strip_prefix('[')?.strip_suffix(tail.as_str()).map(str::to_string))
        .collect()
}

async fn set_status(gds: &Api<GameDeployment>, updated: i32) {
    let status = serde_json::json!({"status": {
        "observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
        "updatedReplicas": updated, "updatedReadyReplicas": updated,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "RolloutInProgress",
                        "message": format!("{updated} of 3 pods run revision watched-1")}],
    }});
    gds.patch_status(NAME, &PatchParams::default(), &Patch::Merge(&status)).await.expect("status patched");
}

/// kube-sim with the CRDs and the GameDeployment, its status at 0 of 3 updated, and a kubeconfig for it in `dir`.
struct Fleet {
    sim: kube_sim::SimHandle,
    dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    gds: Api<GameDeployment>,
}

async fn fleet() -> Fleet {
    let sim = kube_sim::start(kube_sim::SimConfig { kubelet: None, ..Default::default() }).await.expect("kube-sim");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let client = sim.client().await;
    crate::crds::install(&client, DEADLINE).await;
    let gds: Api<GameDeployment> = Api::namespaced(client.clone(), "default");
    let gd: GameDeployment = serde_yaml::from_str(GD).expect("GameDeployment");
    gds.create(&PostParams::default(), &gd).await.expect("created");
    set_status(&gds, 0).await;
    Fleet { sim, dir, kubeconfig, gds }
}

/// Starts `command` with a new pseudo-terminal as its stdout and stderr (stdin empty); returns the child and what
/// it writes to the terminal.
fn on_terminal(mut command: std::process::Command) -> (std::process::Child, Arc<Mutex<Vec<u8>>>) {
    let pty = open_pty();
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(pty.terminal.try_clone().expect("terminal handle"))
        .stderr(pty.terminal.try_clone().expect("terminal handle"))
        .spawn()
        .expect("kubectl-gd starts");
    drop(pty.terminal);
    (child, capture(pty.master))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_redraws_in_place_on_a_terminal() {
    let Fleet { sim, dir: _dir, kubeconfig, gds } = fleet().await;

    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-gd"));
    command.args(["get", NAME, "--watch", "--kubeconfig"]).arg(&kubeconfig).env_remove("NO_COLOR");
    let (mut child, out) = on_terminal(command);

    let first = wait_output(&out, "the first frame", |t| t.contains("updated 0/3")).await;
    assert!(first.starts_with("\x1b[2J"), "the screen is cleared once: {first:?}");
    assert!(first.contains("\x1b[H"), "frames start at the top left: {first:?}");
    assert!(first.contains("\x1b[1m") && first.contains("◌ Progressing"), "colour and symbols: {first:?}");

    // A change on the server: the watch delivers it and the view is drawn again over the old one.
    set_status(&gds, 2).await;
    // Complete frames only: the last one drawn shows the change and ends by clearing the rest of the screen.
    let text = wait_output(&out, "the redrawn frame", |t| {
        t.rsplit("\x1b[H").next().is_some_and(|f| f.contains("updated 2/3") && f.ends_with("\x1b[J"))
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let frames: Vec<&str> = text.split("\x1b[H").skip(1).collect();
    assert!(frames.len() >= 2, "redrawn at least once: {text:?}");
    let last = frames.iter().rev().find(|f| f.contains("updated 2/3")).expect("a frame with the change");
    assert!(!last.contains("updated 0/3"), "the new frame replaces the old one: {last:?}");
    assert!(
        last.lines().all(|l| l.ends_with("\x1b[K") || l == "\x1b[J"),
        "every line clears what the previous frame left on it: {last:?}"
    );
    assert!(last.ends_with("\x1b[J"), "what the previous frame left below is cleared: {last:?}");
    sim.shutdown().await;
}

/// `kubectl gd status NAME` on a pseudo-terminal (issue 49, finding 6): one line redrawn in place every second — a
/// carriage return, the line with the time since the command started, the rest of the line cleared — and a new line
/// when the verdict changes, as `kubectl rollout status` adds one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_redraws_its_line_in_place_on_a_terminal() {
    let Fleet { sim, dir: _dir, kubeconfig, gds } = fleet().await;

    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-gd"));
    command.args(["status", NAME, "--kubeconfig"]).arg(&kubeconfig);
    let (mut child, out) = on_terminal(command);

    // The same line, drawn again as the seconds pass, with two different times since the start (which they are
    // depends on how soon the command draws its first frame on a busy machine): no new line in between.
    let line = "Progressing: 0 of 3 pods run revision watched-1";
    let text = wait_output(&out, "the line redrawn a second later", |t| elapsed_stamps(t, line).len() >= 2).await;
    assert!(!text.contains('\n'), "redrawn in place, not appended: {text:?}");
    // A change: the old line stays, the new one starts on the next line (the terminal writes a new line as
    // "\r\n").
    set_status(&gds, 2).await;
    let text =
        wait_output(&out, "the changed line", |t| t.contains("Progressing: 2 of 3 pods run revision watched-1")).await;
    let _ = child.kill();
    let _ = child.wait();
    let changed = text.find("Progressing: 2 of 3").expect("the change");
    assert!(
        text[..changed].ends_with("] ") && text[..changed].contains("\x1b[K\r\n\r["),
        "a new line for a change: {text:?}"
    );
    sim.shutdown().await;
}
