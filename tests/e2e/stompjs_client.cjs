// What the stomp.js scripts share: a browser STOMP client, @stomp/stompjs, on Node
// with the `ws` WebSocket, connected over URL (ws://HOST:PORT/stomp, subprotocol
// v12.stomp). `connect(url, count, what, onConnect)` calls `onConnect(client, collect)`
// once connected; each `collect(item)` keeps an item, and once COUNT are kept they are
// printed as one JSON line and the script exits 0. An ERROR frame (exit 2), a socket
// closed before then (exit 3) or 30 s without them (exit 4) ends it, naming `what` it
// collects ("messages", "replies").
"use strict";
const { Client } = require("@stomp/stompjs");
const WebSocket = require("ws");

function connect(url, count, what, onConnect) {
  const got = [];
  const client = new Client({
    webSocketFactory: () => new WebSocket(url, ["v12.stomp", "v11.stomp"]),
    reconnectDelay: 0,
    heartbeatIncoming: 0,
    heartbeatOutgoing: 0,
  });
  const collect = (item) => {
    got.push(item);
    if (got.length === count) {
      console.log(JSON.stringify(got));
      client.deactivate().then(() => process.exit(0));
    }
  };
  client.onConnect = () => onConnect(client, collect);
  client.onStompError = (frame) => {
    console.error("ERROR frame:", frame.headers.message);
    process.exit(2);
  };
  client.onWebSocketClose = () => {
    if (got.length < count) {
      console.error("the WebSocket closed after", got.length, what);
      process.exit(3);
    }
  };
  setTimeout(() => {
    console.error("30 s passed with", got.length, "of", count, what);
    process.exit(4);
  }, 30000);
  client.activate();
}

module.exports = { connect };
