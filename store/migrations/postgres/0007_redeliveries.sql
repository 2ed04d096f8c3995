-- A queue message's failed deliveries (its redelivery count, JMS JMSXDeliveryCount - 1),
-- kept across restarts and failovers: a message a consumer refused keeps counting
-- towards `maximum_redeliveries` on the broker that takes over. Adding a column with a
-- constant default rewrites no row.
ALTER TABLE {p}msgs ADD COLUMN redeliveries INTEGER NOT NULL DEFAULT 0;
