//! Sticky sessions (`Sessions`).

use super::*;

#[tokio::test]
async fn sticky_sessions_remember_and_expire() {
    for (name, s) in backends().await {
        let m = &s.sessions;
        assert_eq!(m.account_of(1, "conv").await.unwrap(), None, "{name}");
        m.remember(1, "conv", "acct-b", Duration::from_millis(150))
            .await
            .unwrap();
        assert_eq!(
            m.account_of(1, "conv").await.unwrap().as_deref(),
            Some("acct-b"),
            "{name}"
        );
        assert_eq!(
            m.account_of(2, "conv").await.unwrap(),
            None,
            "{name}: per organization"
        );
        m.remember(1, "conv", "acct-c", Duration::from_millis(150))
            .await
            .unwrap();
        assert_eq!(
            m.account_of(1, "conv").await.unwrap().as_deref(),
            Some("acct-c"),
            "{name}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            m.account_of(1, "conv").await.unwrap(),
            None,
            "{name}: expired"
        );
    }
}
