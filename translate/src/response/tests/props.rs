//! Properties: the client's bytes do not depend on how the supplier's bytes were chunked (splits
//! anywhere, including inside a UTF-8 character or a `\r\n`), and arbitrary supplier bytes never
//! panic and still give a well-formed client stream.

use proptest::prelude::*;

use super::clients::check_stream;
use super::suppliers;
use super::{CLIENTS, SUPPLIERS, run};
use crate::Format;

fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pieces.push(&bytes[start..cut]);
        start = cut;
    }
    pieces.push(&bytes[start..]);
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn chunking_does_not_change_the_output(
        scenario in 0..5usize,
        supplier in 0..3usize,
        client in 0..4usize,
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        let (_, scenario) = &suppliers::all()[scenario];
        let (supplier, client) = (SUPPLIERS[supplier], CLIENTS[client]);
        let stream = suppliers::stream(supplier, scenario);
        let whole = run(supplier, client, true, &[stream.as_bytes()]);
        let chunked = run(supplier, client, true, &split(stream.as_bytes(), &cuts));
        prop_assert_eq!(whole, chunked);
    }

    #[test]
    fn byte_at_a_time_equals_whole(scenario in 0..5usize, supplier in 0..3usize, client in 0..4usize) {
        let (_, scenario) = &suppliers::all()[scenario];
        let (supplier, client) = (SUPPLIERS[supplier], CLIENTS[client]);
        let stream = suppliers::stream(supplier, scenario);
        let bytes: Vec<&[u8]> = stream.as_bytes().chunks(1).collect();
        prop_assert_eq!(run(supplier, client, true, &[stream.as_bytes()]), run(supplier, client, true, &bytes));
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        supplier in 0..4usize,
        client in 0..4usize,
        stream in any::<bool>(),
        chunks in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..64),
                "(data: |event: |:|\r\n|\n|\\{\"type\":\"[a-z_]{0,20}\"|\"choices\":|\\[|\\]|\\}|,|[DONE])*"
                    .prop_map(String::into_bytes),
            ],
            0..12,
        ),
    ) {
        let suppliers = [Format::Chat, Format::Responses, Format::Messages, Format::Gemini];
        let (supplier, client) = (suppliers[supplier], CLIENTS[client]);
        let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let out = run(supplier, client, stream, &chunks);
        if stream {
            check_stream(client, &out);
        } else {
            prop_assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok());
        }
    }
}
