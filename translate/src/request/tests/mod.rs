//! Tests of request translation: each decoder, each encoder, every client × supplier pair, and
//! properties (no panic on arbitrary JSON, round trips within one family).
