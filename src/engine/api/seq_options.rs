//! What every sequence of a request reads of its options: the host's [`RequestOptions`] as submitted, and the two
//! things `Engine::submit` resolves from them once for all the choices. One value per request, shared: no stage
//! keeps a copy of a field.

use super::request::RequestOptions;
use crate::model::TokenId;

/// A request's options as its sequences share them.
#[derive(Debug)]
pub struct SharedOptions {
    /// As the host (or the protocol layer) built them.
    pub given: RequestOptions,
    /// The ids that end a choice: `stop_token_ids`, then the model's end-of-generation ids unless `ignore_eos`.
    pub stop_ids: Box<[TokenId]>,
    /// `deadline_ms` on the engine's clock: the monotonic time after which the choices end with `Deadline`.
    pub deadline: Option<f64>,
}

impl SharedOptions {
    /// `given` with the model's end-of-generation ids `eog_ids` and `submitted_at`, the engine time of the
    /// submission (its deadline counts from there).
    pub fn resolve(given: RequestOptions, eog_ids: &[TokenId], submitted_at: f64) -> Self {
        let mut stop_ids = given.stop_token_ids.clone();
        if !given.ignore_eos {
            stop_ids.extend_from_slice(eog_ids);
        }
        let deadline = given.deadline_ms.map(|ms| submitted_at + ms as f64 / 1000.0);
        SharedOptions { given, stop_ids: stop_ids.into(), deadline }
    }

    /// Default options ending at `stop_ids` (tests that build sequences by hand).
    #[cfg(test)]
    pub fn stopping_at(stop_ids: &[TokenId]) -> std::sync::Arc<Self> {
        std::sync::Arc::new(SharedOptions::resolve(RequestOptions::default(), stop_ids, 0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_ids_and_deadline_are_resolved_once() {
        let given = RequestOptions { stop_token_ids: vec![7], deadline_ms: Some(1500), ..Default::default() };
        let shared = SharedOptions::resolve(given.clone(), &[2, 3], 10.0);
        assert_eq!(&*shared.stop_ids, &[7, 2, 3]);
        assert_eq!(shared.deadline, Some(11.5));
        assert_eq!(shared.given, given);
        let past_eos = SharedOptions::resolve(RequestOptions { ignore_eos: true, ..given }, &[2, 3], 0.0);
        assert_eq!(&*past_eos.stop_ids, &[7]);
        assert_eq!(SharedOptions::resolve(RequestOptions::default(), &[2], 0.0).deadline, None);
    }
}
