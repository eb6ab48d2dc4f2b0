//! Trace and span ids: made here, written as W3C `traceparent`, and handed
//! to the SDK when it builds a span ([`Chosen`]).
//!
//! The SDK (0.33) takes a span's ids from its id generator only, while a
//! request's span id must be known before the request is sent (it goes to
//! the backend in `traceparent`) and the span is built after the answer.
//! So the ids to use are put in a thread-local slot just before the span
//! is built on the same thread, and the generator takes them from there.

use std::cell::Cell;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

thread_local! {
    static NEXT_TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
    static NEXT_SPAN: Cell<Option<SpanId>> = const { Cell::new(None) };
}

pub fn new_trace_id() -> TraceId {
    RandomIdGenerator::default().new_trace_id()
}

pub fn new_span_id() -> SpanId {
    RandomIdGenerator::default().new_span_id()
}

/// The id generator of our tracer: the ids put in the slot for the next
/// span, else random ones.
#[derive(Debug, Default)]
pub struct Chosen(RandomIdGenerator);

impl Chosen {
    /// The next span built on this thread, under a remote parent, gets `span`.
    pub fn next(span: SpanId) {
        NEXT_SPAN.with(|c| c.set(Some(span)));
        NEXT_TRACE.with(|c| c.set(None));
    }

    /// The next span built on this thread, a root, gets `trace` and `span`.
    pub fn root(trace: TraceId, span: SpanId) {
        NEXT_SPAN.with(|c| c.set(Some(span)));
        NEXT_TRACE.with(|c| c.set(Some(trace)));
    }
}

impl IdGenerator for Chosen {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_span_id())
    }
}

/// `00-<trace>-<span>-01`.
pub fn traceparent(trace: TraceId, span: SpanId) -> String {
    format!("00-{trace}-{span}-01")
}

/// A valid W3C `traceparent` (version 00, non-zero ids): its trace and span.
pub fn parse_traceparent(v: &str) -> Option<(TraceId, SpanId)> {
    let mut parts = v.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() || flags.len() != 2 {
        return None;
    }
    u8::from_str_radix(flags, 16).ok()?;
    parse_ids(trace, span)
}

/// A trace id (32 lowercase hex) and span id (16), both non-zero.
pub fn parse_ids(trace: &str, span: &str) -> Option<(TraceId, SpanId)> {
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !hex(trace, 32) {
        return None;
    }
    let t = TraceId::from_hex(trace).ok()?;
    (t != TraceId::INVALID).then_some(())?;
    Some((t, parse_span(span)?))
}

/// A span id (16 lowercase hex), non-zero.
pub fn parse_span(span: &str) -> Option<SpanId> {
    let ok = span.len() == 16
        && span
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let s = SpanId::from_hex(span).ok().filter(|_| ok)?;
    (s != SpanId::INVALID).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_only_when_valid() {
        let t = "4bf92f3577b34da6a3ce929d0e0e4736";
        let s = "00f067aa0ba902b7";
        let (trace, span) = parse_traceparent(&format!("00-{t}-{s}-01")).unwrap();
        assert_eq!((trace.to_string(), span.to_string()), (t.into(), s.into()));
        assert_eq!(traceparent(trace, span), format!("00-{t}-{s}-01"));
        for bad in [
            format!("01-{t}-{s}-01"),
            format!("00-{}-{s}-01", "0".repeat(32)),
            format!("00-{t}-{}-01", "0".repeat(16)),
            format!("00-{}-{s}-01", t.to_uppercase()),
            format!("00-{t}-{s}"),
            format!("00-{t}-{s}-01-x"),
            "garbage".into(),
        ] {
            assert_eq!(parse_traceparent(&bad), None, "{bad}");
        }
    }

    #[test]
    fn the_generator_gives_the_chosen_ids_once() {
        let g = Chosen::default();
        let (t, s) = (new_trace_id(), new_span_id());
        Chosen::root(t, s);
        assert_eq!(g.new_span_id(), s);
        assert_eq!(g.new_trace_id(), t);
        assert_ne!(g.new_span_id(), s);
        assert_ne!(g.new_trace_id(), t);
    }
}
