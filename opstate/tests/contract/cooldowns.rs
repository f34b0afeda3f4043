//! Account cooldowns (`Cooldowns`).

use super::*;

#[tokio::test]
async fn cooldowns_grow_never_shrink_and_expire() {
    use opstate::CoolCause::{Failure, UsageLimit};
    for (name, s) in backends().await {
        let c = &s.cooldowns;
        assert_eq!(
            c.remaining(&["a", "b"]).await.unwrap(),
            vec![None, None],
            "{name}"
        );
        c.cool("a", Duration::from_millis(300), UsageLimit)
            .await
            .unwrap();
        c.cool("a", Duration::from_millis(50), Failure)
            .await
            .unwrap();
        let left = c.remaining(&["a", "b"]).await.unwrap();
        let a = left[0].unwrap();
        assert!(
            a.left > Duration::from_millis(200),
            "{name}: a shorter cooldown never cuts a longer one"
        );
        assert_eq!(
            a.cause, UsageLimit,
            "{name}: the longer cooldown keeps its cause"
        );
        assert_eq!(left[1], None, "{name}");
        c.cool("b", Duration::from_millis(60), Failure)
            .await
            .unwrap();
        assert_eq!(
            c.remaining(&["b"]).await.unwrap()[0].map(|b| b.cause),
            Some(Failure),
            "{name}"
        );
        // A longer cooldown of another cause replaces it, cause included.
        c.cool("b", Duration::from_millis(80), UsageLimit)
            .await
            .unwrap();
        assert_eq!(
            c.remaining(&["b"]).await.unwrap()[0].map(|b| b.cause),
            Some(UsageLimit),
            "{name}"
        );
        tokio::time::sleep(Duration::from_millis(120)).await;
        let left = c.remaining(&["a", "b"]).await.unwrap();
        assert!(
            left[0].is_some() && left[1].is_none(),
            "{name}: b expired: {left:?}"
        );
        assert!(c.remaining(&[]).await.unwrap().is_empty());
    }
}
