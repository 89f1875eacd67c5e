//! Game servers' per-pod endpoints for race-to-empty tests: an HTTP server on loopback answering `GET /<pod>` with a
//! JSON body of the test's choosing for that pod ([`per_pod_server`]). [`players_server`] answers
//! `{"players": 0}` for the pods in a set the test controls (the empty servers) and `{"players": 5}` for every other
//! pod; the HookTemplates `hooktemplate-empty` and `hooktemplate-empty-thrice` ask it per pod (`{{ args.PodName }}`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Starts a server answering `GET /<pod>` with `answer(pod)` as its JSON body; returns its address and the pods
/// asked so far, in order.
pub async fn per_pod_server(
    answer: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let address = listener.local_addr().expect("address");
    let asked: Arc<Mutex<Vec<String>>> = Default::default();
    let record = asked.clone();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let answer = answer.clone();
            let record = record.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let n = stream.read(&mut buffer).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buffer[..n]);
                let pod = request.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
                let body = answer(&pod);
                record.lock().expect("not poisoned").push(pod);
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    (address, asked)
}

/// Starts the players server; returns its address and the pods asked so far, in order.
pub async fn players_server(empty: Arc<Mutex<BTreeSet<String>>>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    per_pod_server(move |pod| {
        let players = if empty.lock().expect("not poisoned").contains(pod) { 0 } else { 5 };
        format!(r#"{{"players": {players}}}"#)
    })
    .await
}
