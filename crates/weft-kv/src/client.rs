//! A small blocking RESP client (to be written).
