//! The backend contract (the cases in `convo_testutil`), one test per case
//! and backend.

use convo_testutil::{self as testing, *};

testing::for_each_backend!(
    testing::with_store;
    [sqlite = Sqlite, sqlite_memory = SqliteMemory, postgres = Postgres];
    (
        sessions_are_found_by_id_prefix_and_title,
        a_turn_chains_numbers_and_submits,
        rule_violations_write_nothing,
        same_input_in_same_context_has_same_submission,
        fork_shares_history_and_restores_state,
        promote_seals_main_and_renames,
        fork_and_promote_events_never_share_a_hash,
        complete_carries_explicit_or_branch_state,
        follow_cursor_is_gap_free,
        bulk_append_matches_single_appends,
        verify_is_clean_on_a_busy_store,
        pages_match_the_whole_timeline_near_forks_and_seals,
        search_finds_ranks_and_places_hits,
        repeated_payloads_are_stored_once_and_read_back_whole,
        search_filters_by_agent_model_status_and_failure,
        otlp_bodies_are_kept_listed_and_rebuilt,
        search_counts_a_resent_message_once,
        search_folds_matches_across_many_sessions,
    )
);

#[test]
fn every_contract_case_is_listed() {
    assert_eq!(
        testing::ALL.len(),
        18,
        "add the new case to tests/contract.rs"
    );
}
