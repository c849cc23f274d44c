//! A fleet document holds no more overrides than a keyed limiter takes.

#[test]
fn a_document_holds_as_many_overrides_as_a_keyed_limiter() {
    assert_eq!(
        super::MAX_OVERRIDES,
        crate::KeyedLimiter::<String>::MAX_OVERRIDES
    );
}
