//! The HTTP tests' harness: an axum app served on loopback with the
//! peer's address in each request, a hyper-util client whose connections
//! leave from a chosen loopback address, and the RateLimit fields parsed
//! as Structured Fields by `sfv`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Serves `app` on 127.0.0.1, with the peer address in each request.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// A client whose connections leave from `from` (a loopback address).
pub fn client(from: &str) -> Client<HttpConnector, Empty<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(from.parse().unwrap()));
    Client::builder(TokioExecutor::new()).build(connector)
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

pub async fn get_from(
    client: &Client<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut request = Request::get(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (head, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: head.status,
        headers: head.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub fn header<'a>(answer: &'a Answer, name: &str) -> &'a str {
    answer
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", answer.headers))
        .to_str()
        .unwrap()
}

/// The single item of an SF List: its String and its Integer parameters.
pub fn sf_item(field: &str) -> (String, HashMap<String, i64>) {
    let mut list = sf_list(field);
    assert_eq!(list.len(), 1, "{field}");
    let (name, params) = list.remove(0);
    let params = params
        .into_iter()
        .map(|(k, v)| {
            let n = v
                .parse()
                .unwrap_or_else(|_| panic!("{field}: {k} is {v}, not an Integer"));
            (k, n)
        })
        .collect();
    (name, params)
}

/// Every item of an SF List: its String and its parameters, each as text
/// (an Integer in decimal, a String as it is, a Byte Sequence in hex).
pub fn sf_list(field: &str) -> Vec<(String, HashMap<String, String>)> {
    use sfv::{BareItem, List, ListEntry, Parser};
    let list: List = Parser::new(field)
        .parse()
        .unwrap_or_else(|e| panic!("{field}: {e}"));
    list.iter()
        .map(|entry| {
            let ListEntry::Item(item) = entry else {
                panic!("{field}: an inner list")
            };
            let BareItem::String(name) = &item.bare_item else {
                panic!("{field}: the item is not a String")
            };
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        BareItem::Integer(n) => i64::from(*n).to_string(),
                        BareItem::String(s) => s.as_str().to_owned(),
                        BareItem::ByteSequence(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
                        other => panic!("{field}: {k} is {other:?}"),
                    };
                    (k.as_str().to_owned(), v)
                })
                .collect();
            (name.as_str().to_owned(), params)
        })
        .collect()
}
