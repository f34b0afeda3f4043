//! Media files (`Media`).

use super::*;

#[tokio::test]
async fn media_files_round_trip_and_expire() {
    for (name, s) in backends().await {
        let m = &s.media;
        assert_eq!(m.get("img").await.unwrap(), None, "{name}");
        let png = opstate::MediaFile {
            content_type: "image/png".into(),
            bytes: bytes::Bytes::from_static(b"\x89PNG\r\n\x1a\n\0binary\0bytes"),
        };
        m.put("img", &png, Duration::from_millis(150))
            .await
            .unwrap();
        assert_eq!(m.get("img").await.unwrap().as_ref(), Some(&png), "{name}");
        assert_eq!(m.get("other").await.unwrap(), None, "{name}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(m.get("img").await.unwrap(), None, "{name}: expired");
    }
}

/// `touch` (batch line claims, issue 46): the TTL moves only while the entry is still the claim
/// it was; an answer that replaced it, an entry of another type, or none at all is not touched.
#[tokio::test]
async fn a_claim_is_touched_only_while_it_is_the_claim() {
    for (name, s) in backends().await {
        let m = &s.media;
        let claim = opstate::MediaFile {
            content_type: "tollgate/claim".into(),
            bytes: bytes::Bytes::new(),
        };
        let short = Duration::from_millis(300);
        assert_eq!(
            m.put_new("line", &claim, short).await.unwrap(),
            None,
            "{name}"
        );
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert!(
                m.touch("line", "tollgate/claim", short).await.unwrap(),
                "{name}"
            );
        }
        // 600 ms past its first TTL, the touched claim is alive.
        assert_eq!(
            m.get("line").await.unwrap().as_ref(),
            Some(&claim),
            "{name}"
        );
        // A prefix of the content type is not the content type.
        assert!(
            !m.touch("line", "tollgate/cl", short).await.unwrap(),
            "{name}"
        );
        let answer = opstate::MediaFile {
            content_type: "tollgate/claimed-answer".into(),
            bytes: bytes::Bytes::from_static(b"{}"),
        };
        m.put("line", &answer, short).await.unwrap();
        assert!(
            !m.touch("line", "tollgate/claim", Duration::from_secs(60))
                .await
                .unwrap(),
            "{name}"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            m.get("line").await.unwrap(),
            None,
            "{name}: the answer kept its own TTL"
        );
        assert!(
            !m.touch("line", "tollgate/claim", short).await.unwrap(),
            "{name}: gone"
        );
    }
}
