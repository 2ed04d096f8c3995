// Request/reply from a browser STOMP client, @stomp/stompjs, on Node with the `ws`
// WebSocket (issue 33): connects over URL (ws://HOST:PORT/stomp), subscribes to its
// own temporary queue `/temp-queue/replies`, prints "subscribed" once the SUBSCRIBE's
// receipt comes, then sends COUNT requests to WORK_QUEUE, each with
// `reply-to:/temp-queue/replies` and `correlation-id:c<i>`, and once COUNT replies came
// prints them as one JSON line of [correlation-id, body] pairs and exits 0. An ERROR
// frame, a closed socket or 30 s without every reply exits non-zero.
//
// Usage: NODE_PATH=.../node_modules node stompjs_requester.cjs URL WORK_QUEUE COUNT
"use strict";
const { Client } = require("@stomp/stompjs");
const WebSocket = require("ws");

const [url, workQueue, countText] = process.argv.slice(2);
const count = Number(countText);
const replies = [];
const client = new Client({
  webSocketFactory: () => new WebSocket(url, ["v12.stomp", "v11.stomp"]),
  reconnectDelay: 0,
  heartbeatIncoming: 0,
  heartbeatOutgoing: 0,
});
client.onConnect = () => {
  client.watchForReceipt("subscribed", () => {
    console.log("subscribed");
    for (let i = 0; i < count; i++) {
      client.publish({
        destination: workQueue,
        body: `q${i}`,
        headers: { "reply-to": "/temp-queue/replies", "correlation-id": `c${i}` },
      });
    }
  });
  client.subscribe("/temp-queue/replies", (message) => {
    replies.push([message.headers["correlation-id"], message.body]);
    if (replies.length === count) {
      console.log(JSON.stringify(replies));
      client.deactivate().then(() => process.exit(0));
    }
  }, { receipt: "subscribed" });
};
client.onStompError = (frame) => {
  console.error("ERROR frame:", frame.headers.message);
  process.exit(2);
};
client.onWebSocketClose = () => {
  if (replies.length < count) {
    console.error("the WebSocket closed after", replies.length, "replies");
    process.exit(3);
  }
};
setTimeout(() => {
  console.error("30 s passed with", replies.length, "of", count, "replies");
  process.exit(4);
}, 30000);
client.activate();
