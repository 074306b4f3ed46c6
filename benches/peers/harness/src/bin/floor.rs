//! The floor of benches/peers: a bare hyper server on tokio's multi-thread
//! runtime (as Portcullis runs) that reads each request's body and answers
//! a fixed `200` with `{}`. What any HTTP/1.1 server on this machine pays
//! per request before doing any work: the loads' figures are compared with
//! it.
//!
//!   floor [ADDR]     # default 127.0.0.1:0; prints `LISTENING <port>`

use std::convert::Infallible;
use std::io::Write as _;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

async fn answer(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    // Read the body, as a server that looks at it would; a failed read is
    // answered the same.
    let _ = req.into_body().collect().await;
    let mut response = Response::new(Full::new(Bytes::from_static(b"{}")));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    let port = listener.local_addr()?.port();
    let mut out = std::io::stdout();
    writeln!(out, "LISTENING {port}")?;
    out.flush()?;
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}
