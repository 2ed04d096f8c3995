// A browser STOMP client, @stomp/stompjs, on Node with the `ws` WebSocket: subscribes
// to DESTINATION over URL (ws://HOST:PORT/stomp, subprotocol v12.stomp), prints
// "subscribed" once the SUBSCRIBE's receipt comes, then the bodies of the first COUNT
// messages as one JSON line, and exits 0. An ERROR frame, a closed socket or 30 s
// without them exits non-zero.
//
// Usage: NODE_PATH=.../node_modules node stompjs_subscriber.cjs URL DESTINATION COUNT
"use strict";
const { Client } = require("@stomp/stompjs");
const WebSocket = require("ws");

const [url, destination, countText] = process.argv.slice(2);
const count = Number(countText);
const bodies = [];
const client = new Client({
  webSocketFactory: () => new WebSocket(url, ["v12.stomp", "v11.stomp"]),
  reconnectDelay: 0,
  heartbeatIncoming: 0,
  heartbeatOutgoing: 0,
});
client.onConnect = () => {
  client.watchForReceipt("subscribed", () => console.log("subscribed"));
  client.subscribe(destination, (message) => {
    bodies.push(message.body);
    if (bodies.length === count) {
      console.log(JSON.stringify(bodies));
      client.deactivate().then(() => process.exit(0));
    }
  }, { receipt: "subscribed" });
};
client.onStompError = (frame) => {
  console.error("ERROR frame:", frame.headers.message);
  process.exit(2);
};
client.onWebSocketClose = () => {
  if (bodies.length < count) {
    console.error("the WebSocket closed after", bodies.length, "messages");
    process.exit(3);
  }
};
setTimeout(() => {
  console.error("30 s passed with", bodies.length, "of", count, "messages");
  process.exit(4);
}, 30000);
client.activate();
