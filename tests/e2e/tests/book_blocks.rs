//! The book's pages as a newcomer follows them: every command of the blocks marked
//! `<!-- checked: book_blocks::TEST -->` runs in a shell against a `scripts/sandbox --fast` (the sandbox the pages
//! start), in page order, and prints what the page shows, names and times masked (`e2e::book`). One sandbox serves
//! the walkthrough and the pages that start where it starts (the sandbox page's and the hooks page's `check`
//! commands, the plan page's forecasts of the walkthrough's GameDeployment); the shadow hooks and server-state pages
//! have their own.

use e2e::book::{Book, Reader};
use e2e::sandbox::{Sandbox, ensure_binaries, free_base};

/// The walkthrough, top to bottom, on the sandbox it tells the reader to start; before its scale-in, the plan page's
/// forecasts of the same GameDeployment and the `check` commands of the sandbox and hooks pages against the
/// sandbox's demo web server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walkthrough() {
    ensure_binaries();
    let port = free_base();
    let mut sandbox = Sandbox::start_with(port, &["--fast"]);
    sandbox.wait_ready().await;
    let book = Book::of_this_test();
    // The pages name the default sandbox's demo web server; this one has its own port.
    let mut shell =
        Reader::new(&sandbox.state().join("kubeconfig")).replace("127.0.0.200:9091", &sandbox.demo_address());

    shell.run_next(&book, "sandbox.md", None).await;
    shell.run_next(&book, "concepts/behaviour.md", None).await;

    let page = "walkthrough.md";
    shell.run_next(&book, page, None).await;
    // The plan page forecasts this GameDeployment (its pods available after `minReadySeconds: 30`).
    let plan = "operating/kubectl-gd-plan.md";
    for _ in 0..3 {
        shell.run_next(&book, plan, None).await;
    }
    // Scale-in, in-place update, its end, the failing hook, the retry, `kubectl delete pod`, podsToDelete.
    for _ in 0..7 {
        shell.run_next(&book, page, None).await;
    }
    // The pod gate: the operator labels the pods for the webhook once the annotation is there (a reader types slower
    // than that).
    shell.run_next(&book, page, Some("kubectl delete")).await;
    let labelled = "kubectl get pods -l gamedeployment.tkex.tencent.com/pod-gate=true -o name | wc -l";
    e2e::wait_for("the operator to label the pods for the pod gate", e2e::book::LOOK_DEADLINE, || async {
        (shell.sh(labelled).await.1.trim().parse::<u32>().unwrap_or(0) >= 4).then_some(())
    })
    .await;
    shell.run_next(&book, page, None).await;
    drop(book);
}

/// The shadow hooks page's scene on its own sandbox: the walkthrough's GameDeployment, the fail template renamed
/// `trial` (measuring every 180s, so the real hook ends first) as its shadow pre-delete hook, a scale-in from 6 to 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_hooks() {
    ensure_binaries();
    let mut sandbox = Sandbox::start_with(free_base(), &["--fast"]);
    sandbox.wait_ready().await;
    let book = Book::of_this_test();
    let mut shell = Reader::new(&sandbox.state().join("kubeconfig"));
    shell.run_next(&book, "api/shadow-hooks.md", None).await;
    drop(book);
}

/// The server-declared state page's scene on its own sandbox: `examples/inplace-update.yaml`, one server labelled
/// `Maintaining`, an image change rolled in place around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_state() {
    ensure_binaries();
    let mut sandbox = Sandbox::start_with(free_base(), &["--fast"]);
    sandbox.wait_ready().await;
    let book = Book::of_this_test();
    let mut shell = Reader::new(&sandbox.state().join("kubeconfig"));
    shell.run_next(&book, "api/server-state.md", None).await;
    drop(book);
}
