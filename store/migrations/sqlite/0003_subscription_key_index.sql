-- A durable subscription is `(client_id, sub_name)` across the whole broker (JMS, case
-- DUR-11): subscribing a name to another topic replaces the subscription on the old
-- one. `find_subscription_containers` looks a key up by this index instead of reading
-- every subscription row.
CREATE INDEX IF NOT EXISTS {p}acks_kidx ON {p}acks (client_id, sub_name);
