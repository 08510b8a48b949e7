-- The OTLP export bodies the receiver was sent (`/v1/traces`, `/v1/logs`),
-- kept so nothing its mapping to nodes drops is lost. `residual` is the
-- body as received (gunzipped), delta-encoded against `base` (an earlier
-- export's body) and the payloads of the nodes `nodes_from..=nodes_to`
-- (follow numbers) that the export wrote; see convo_formats::otel::raw.
-- `sessions` lists the sessions its calls belong to, each between spaces.
-- Not a node, not hashed: telemetry as received, beside the history.
CREATE TABLE otlp_exports (
    seq         INTEGER PRIMARY KEY,
    sessions    TEXT    NOT NULL,
    received_at INTEGER NOT NULL,
    media       TEXT    NOT NULL,
    base        INTEGER,
    nodes_from  INTEGER,
    nodes_to    INTEGER,
    body_len    INTEGER NOT NULL,
    residual    BLOB    NOT NULL
);
