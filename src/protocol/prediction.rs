//! Fields current OpenAI SDKs send that never change what ember writes, read so that they are checked rather
//! than refused: `prediction` (Predicted Outputs: the text the output is expected to repeat, which ember's
//! speculative decoding drafts from; speculation is exact, so the output is the one without it) and
//! `modalities` (`["text"]` is what ember writes; audio is refused by name).

use serde_json::Value;

use super::error::ApiError;
use super::fields::{as_array, as_object, as_str, get, type_error, Object};

/// `prediction`: `{"type": "content", "content": string | [{"type": "text", "text"}]}`, its text.
pub(crate) fn parse_prediction(o: &Object) -> Result<Option<String>, ApiError> {
    let Some(prediction) = get(o, "prediction") else { return Ok(None) };
    let p = as_object(prediction, "prediction")?;
    match get(p, "type").map(|t| as_str(t, "prediction.type")).transpose()? {
        Some("content") => {}
        other => {
            return Err(ApiError::invalid(
                "prediction.type",
                format!(
                    "prediction.type must be \"content\", got {}",
                    other.map_or("nothing".into(), |t| format!("{t:?}"))
                ),
            ))
        }
    }
    let content =
        get(p, "content").ok_or_else(|| ApiError::invalid("prediction.content", "prediction.content is required"))?;
    let text = match content {
        Value::String(text) => text.clone(),
        Value::Array(_) => {
            let mut text = String::new();
            for (i, part) in as_array(content, "prediction.content")?.iter().enumerate() {
                let param = format!("prediction.content[{i}]");
                let part = as_object(part, &param)?;
                if get(part, "type").and_then(Value::as_str) != Some("text") {
                    return Err(ApiError::invalid(format!("{param}.type"), format!("{param}.type must be \"text\"")));
                }
                let piece =
                    get(part, "text").ok_or_else(|| ApiError::invalid(format!("{param}.text"), "text is required"))?;
                text.push_str(as_str(piece, &format!("{param}.text"))?);
            }
            text
        }
        other => return Err(type_error("prediction.content", "a string or an array of text parts", other)),
    };
    Ok(Some(text))
}

/// `modalities`: the output modalities asked for; ember writes text only.
pub(crate) fn check_modalities(o: &Object) -> Result<(), ApiError> {
    let Some(modalities) = get(o, "modalities") else { return Ok(()) };
    for (i, m) in as_array(modalities, "modalities")?.iter().enumerate() {
        let m = as_str(m, &format!("modalities[{i}]"))?;
        if m != "text" {
            return Err(ApiError::invalid(
                format!("modalities[{i}]"),
                format!("modality {m:?} is not supported: ember writes text only"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Object {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_prediction_is_its_text() {
        let o = object(json!({"prediction": {"type": "content", "content": "abc"}}));
        assert_eq!(parse_prediction(&o).unwrap().as_deref(), Some("abc"));
        let parts = object(
            json!({"prediction": {"type": "content", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}),
        );
        assert_eq!(parse_prediction(&parts).unwrap().as_deref(), Some("ab"));
        assert_eq!(parse_prediction(&object(json!({}))).unwrap(), None);
        let bad = |v: Value| parse_prediction(&object(v)).unwrap_err().param.unwrap();
        assert_eq!(bad(json!({"prediction": {"type": "image", "content": "a"}})), "prediction.type");
        assert_eq!(bad(json!({"prediction": {"type": "content"}})), "prediction.content");
        assert_eq!(bad(json!({"prediction": {"type": "content", "content": 3}})), "prediction.content");
        assert_eq!(
            bad(json!({"prediction": {"type": "content", "content": [{"type": "image_url"}]}})),
            "prediction.content[0].type"
        );
    }

    #[test]
    fn text_is_the_one_modality() {
        assert!(check_modalities(&object(json!({"modalities": ["text"]}))).is_ok());
        assert!(check_modalities(&object(json!({}))).is_ok());
        let e = check_modalities(&object(json!({"modalities": ["text", "audio"]}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("modalities[1]"));
    }
}
