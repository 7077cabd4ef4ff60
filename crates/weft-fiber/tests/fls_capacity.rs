//! FLS capacity (its own test binary: it takes every index in the process).

use weft_fiber::win::*;

#[test]
fn flsalloc_hands_out_indexes_1_to_4079_then_fails_with_not_enough_memory() {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        let mut got = Vec::new();
        loop {
            let i = FlsAlloc(None);
            if i == FLS_OUT_OF_INDEXES {
                assert_eq!(GetLastError(), ERROR_NOT_ENOUGH_MEMORY, "as on Windows");
                break;
            }
            got.push(i);
            assert!(got.len() < 4080, "more indexes than the limit");
        }
        assert_eq!(got.len(), 4079);
        assert!(!got.contains(&0), "index 0 is never returned");
        got.sort();
        assert_eq!(got.first(), Some(&1));
        assert_eq!(got.last(), Some(&4079));
        assert_eq!(FlsSetValue(4079, 9 as LPVOID), TRUE);
        assert_eq!(FlsGetValue(4079) as usize, 9);
        assert_eq!(FlsSetValue(4080, 9 as LPVOID), FALSE);
        assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
        assert_eq!(FlsFree(17), TRUE);
        assert_eq!(FlsAlloc(None), 17, "a freed index is handed out again");
        for i in got {
            assert_eq!(FlsFree(i), TRUE);
        }
    }
}
