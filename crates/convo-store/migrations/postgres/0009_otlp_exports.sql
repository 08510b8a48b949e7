-- The OTLP export bodies the receiver was sent (see sqlite/0011_otlp_exports.sql).
CREATE TABLE otlp_exports (
    seq         BIGINT PRIMARY KEY,
    sessions    TEXT   NOT NULL,
    received_at BIGINT NOT NULL,
    media       TEXT   NOT NULL,
    base        BIGINT,
    nodes_from  BIGINT,
    nodes_to    BIGINT,
    body_len    BIGINT NOT NULL,
    residual    BYTEA  NOT NULL
);
