use convo_store::Store;
use convo_testutil as testing;

macro_rules! contract {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;
            macro_rules! case {
                ($name:ident) => {
                    #[test]
                    fn $name() {
                        let make: fn() -> Option<(Store, Box<dyn std::any::Any>)> = $make;
                        let Some((mut s, _guard)) = make() else {
                            return;
                        };
                        testing::$name(&mut s);
                    }
                };
            }
            case!(sessions_are_found_by_id_prefix_and_title);
            case!(a_turn_chains_numbers_and_submits);
            case!(rule_violations_write_nothing);
            case!(same_input_in_same_context_has_same_submission);
            case!(fork_shares_history_and_restores_state);
            case!(promote_seals_main_and_renames);
            case!(fork_and_promote_events_never_share_a_hash);
            case!(complete_carries_explicit_or_branch_state);
            case!(follow_cursor_is_gap_free);
            case!(bulk_append_matches_single_appends);
            case!(verify_is_clean_on_a_busy_store);
            case!(pages_match_the_whole_timeline_near_forks_and_seals);
            case!(search_finds_ranks_and_places_hits);
            case!(repeated_payloads_are_stored_once_and_read_back_whole);
            case!(search_filters_by_agent_model_status_and_failure);

            #[test]
            fn every_contract_case_is_listed() {
                assert_eq!(
                    testing::ALL.len(),
                    15,
                    "add the new case to tests/contract.rs"
                );
            }
        }
    };
}

contract!(sqlite_file, || {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("convo.db").display()
    ))
    .unwrap();
    Some((s, Box::new(dir)))
});
contract!(sqlite_memory, || Some((
    Store::open("sqlite::memory:").unwrap(),
    Box::new(())
)));
contract!(postgres, || {
    let db = testing::pg_database()?;
    let s = Store::open(&db.url).unwrap();
    Some((s, Box::new(db)))
});
