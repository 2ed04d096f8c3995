// A browser STOMP client, @stomp/stompjs, on Node with the `ws` WebSocket: subscribes
// to DESTINATION over URL (ws://HOST:PORT/stomp, subprotocol v12.stomp), prints
// "subscribed" once the SUBSCRIBE's receipt comes, then the bodies of the first COUNT
// messages as one JSON line, and exits 0. An ERROR frame, a closed socket or 30 s
// without them exits non-zero.
//
// Usage: NODE_PATH=.../node_modules node stompjs_subscriber.cjs URL DESTINATION COUNT
"use strict";
const { connect } = require("./stompjs_client.cjs");

const [url, destination, countText] = process.argv.slice(2);
connect(url, Number(countText), "messages", (client, collect) => {
  client.watchForReceipt("subscribed", () => console.log("subscribed"));
  client.subscribe(destination, (message) => collect(message.body), { receipt: "subscribed" });
});
