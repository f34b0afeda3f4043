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
