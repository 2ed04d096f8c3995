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
const { connect } = require("./stompjs_client.cjs");

const [url, workQueue, countText] = process.argv.slice(2);
const count = Number(countText);
connect(url, count, "replies", (client, collect) => {
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
  client.subscribe(
    "/temp-queue/replies",
    (message) => collect([message.headers["correlation-id"], message.body]),
    { receipt: "subscribed" },
  );
});
