//! The state word's generations of a resting state.

use super::*;

/// The table's promise: successive changes to a resting state publish
/// words that do not repeat for `GENERATIONS` changes, stand for the
/// same state, stay above `MAX_TAT` and never reach `REBASING`.
#[test]
fn a_resting_state_gets_a_new_word_on_each_change_until_the_table_wraps() {
    for rest in [FRESH, FULL] {
        let mut word = rest;
        let mut seen = std::collections::HashSet::new();
        for change in 0..GENERATIONS {
            word = word_after_rebase(word, state(word));
            assert!(word > MAX_TAT && word != REBASING, "change {change}");
            assert_eq!(state(word), rest, "change {change}");
            assert!(seen.insert(word), "word {word} repeated at change {change}");
        }
        // The next change wraps to the first generation's word.
        assert_eq!(word_after_rebase(word, rest), MAX_TAT + 1 + rest);
    }
    // A state below the table is its own word.
    assert_eq!(word_after_rebase(FRESH, 12345), 12345);
    assert_eq!(word_after_rebase(MAX_TAT + 7, 12345), 12345);
}
