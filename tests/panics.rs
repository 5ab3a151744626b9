//! A panic in user code becomes an error of kind `Panicked` that names the stage
//! whose closure panicked (`Error::stage`, and in its message), for every operator,
//! source and sink that runs a user closure.

use weir::prelude::*;
use weir::source::Step;
use weir::{BoxPublisher, Error, ErrorKind};

/// Panics at the third call: the error carries `"boom"` as its message.
fn boom(x: u32) -> u32 {
    assert!(x != 2, "boom");
    x
}

fn stage_of(result: Result<impl std::fmt::Debug, Error>) -> Option<&'static str> {
    let error = result.expect_err("the closure panicked");
    assert_eq!(error.kind(), ErrorKind::Panicked, "{error}");
    assert!(error.message().contains("boom"), "{error}");
    if let Some(stage) = error.stage() {
        assert_eq!(
            error.to_string(),
            format!("user code panicked in {stage}: {}", error.message())
        );
    }
    error.stage()
}

/// The closure stages (`map`, `filter`, `filter_map`, `inspect`) over `range()`,
/// each collected, and the two folding sinks.
fn closure_stages<P: Publisher<Item = u32>>(
    range: impl Fn() -> P,
) -> Vec<(&'static str, Result<Vec<u32>, Error>)> {
    let fold = range().fold(0, |a, x| a + boom(x)).wait().map(|n| vec![n]);
    let each = range()
        .for_each(|x| {
            boom(x);
        })
        .wait()
        .map(|()| Vec::new());
    vec![
        ("map", range().map(boom).collect().wait()),
        (
            "filter",
            range().filter(|x| boom(*x) < 100).collect().wait(),
        ),
        (
            "filter_map",
            range().filter_map(|x| Some(boom(x))).collect().wait(),
        ),
        (
            "inspect",
            range()
                .inspect(|x| {
                    boom(*x);
                })
                .collect()
                .wait(),
        ),
        ("fold", fold),
        ("for_each", each),
    ]
}

#[test]
fn operators_name_themselves() {
    let range = || weir::range(0u32..10);
    let mut cases = closure_stages(range);
    cases.extend(vec![
        ("scan", range().scan(0, |a, x| a + boom(x)).collect().wait()),
        (
            "take_while",
            range().take_while(|x| boom(*x) < 100).collect().wait(),
        ),
        (
            "skip_while",
            range().skip_while(|x| boom(*x) < 5).collect().wait(),
        ),
        (
            "reduce",
            range().reduce(|a, x| a + boom(x)).collect().wait(),
        ),
        (
            "flat_map",
            range()
                .flat_map(|x| weir::just(boom(x)), 2, 4)
                .collect()
                .wait(),
        ),
        (
            "zip",
            range().zip(range(), |a, b| boom(a) + b).collect().wait(),
        ),
    ]);
    for (name, result) in cases {
        assert_eq!(stage_of(result), Some(name), "{name}");
    }
}

/// The closure stages fuse into one loop when a fold ends a synchronous chain (the
/// cases above); behind a `BoxPublisher` (which does not fuse) they run subscribed,
/// and name themselves the same way.
#[test]
fn closure_stages_name_themselves_when_subscribed() {
    for (name, result) in closure_stages(|| BoxPublisher::new(weir::range(0u32..10))) {
        assert_eq!(stage_of(result), Some(name), "{name}");
    }
}

#[test]
fn sources_and_sinks_name_themselves() {
    let mut n = 0;
    let generated = weir::generate((), move |_| {
        n += 1;
        Step::Next(boom(n - 1))
    });
    assert_eq!(
        stage_of(generated.take(5).collect().wait()),
        Some("generate")
    );
    let iterated = weir::from_iter((0u32..10).map(boom));
    assert_eq!(stage_of(iterated.collect().wait()), Some("from_iter"));
    let created = weir::create(|_emitter: weir::source::Emitter<u32>| {
        boom(2);
    });
    assert_eq!(stage_of(created.collect().wait()), Some("create"));
    let deferred = weir::defer(|| weir::just(boom(2)));
    assert_eq!(stage_of(deferred.collect().wait()), Some("defer"));
    // The sinks `fold` and `for_each`: in `closure_stages`, fused and subscribed.
}

#[cfg(feature = "tokio")]
#[test]
fn async_sinks_name_themselves() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let result = runtime.block_on(async {
        weir::range(0u32..10)
            .for_each_async(|x| async move {
                boom(x);
            })
            .await
    });
    assert_eq!(stage_of(result), Some("for_each_async"));
}

#[test]
fn an_error_that_is_not_a_panic_names_no_stage() {
    let error = weir::error::<u32>(Error::msg("upstream failed"))
        .map(|x| x + 1)
        .collect()
        .wait()
        .unwrap_err();
    assert_eq!(error.stage(), None);
    assert_eq!(error.to_string(), "upstream error: upstream failed");
}
