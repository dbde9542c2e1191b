//! A model ready to use: the file (read into memory or mapped), its hyperparameters, tokenizer and chat template, loaded and
//! validated together.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::chat_template::{ChatTemplate, TemplateChoice, TemplateError};
use super::gguf::{GgufError, GgufFile, LoadMode};
use super::llama::{LlamaConfig, ModelConfigError};
use super::locate::locate_model;
use super::path::ModelNotFound;
use super::progress::LoadProgress;
use super::tokenizer::{Tokenizer, TokenizerError};

/// A loaded model. The file is shared (`Arc`) so that an engine thread can hold it while the host holds this; the
/// tokenizer too, so that [`Model::with_chat_template`] costs only the template.
pub struct Model {
    pub path: PathBuf,
    pub file: Arc<GgufFile>,
    pub config: LlamaConfig,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: ChatTemplate,
}

/// Why a model could not be loaded.
#[derive(Debug)]
pub enum ModelError {
    NotFound(ModelNotFound),
    Gguf(GgufError),
    Config(ModelConfigError),
    Tokenizer(TokenizerError),
    Template(TemplateError),
    /// A hub name that could not be resolved to a file in the cache (`crate::hub`).
    Hub(crate::hub::HubError),
    /// A string that is no file here, read as a hub name the hub does not have (or could not be asked about).
    NotFoundAnywhere {
        name: String,
        error: crate::hub::HubError,
    },
    /// A hub name whose model is split in several files (all in the cache now), which ember does not load.
    Split {
        name: String,
        parts: Vec<PathBuf>,
    },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::NotFound(e) => e.fmt(f),
            ModelError::Gguf(e) => e.fmt(f),
            ModelError::Config(e) => e.fmt(f),
            ModelError::Tokenizer(e) => write!(f, "tokenizer: {e}"),
            ModelError::Template(e) => e.fmt(f),
            ModelError::Hub(e) => e.fmt(f),
            ModelError::NotFoundAnywhere { name, error } => {
                write!(f, "no file {name} here, and as a Hugging Face hub name: {error}")
            }
            ModelError::Split { name, parts } => write!(
                f,
                "{name} is split in {} files (all in the cache, the first {}); ember loads a model from one file: \
                 merge them with llama.cpp's `llama-gguf-split --merge FIRST OUT.gguf` and load OUT.gguf",
                parts.len(),
                parts[0].display()
            ),
        }
    }
}

impl std::error::Error for ModelError {}

impl Model {
    /// Loads the model at `path` (a file, or a hub name: [`locate_model`]), or where the model-path rule points
    /// when `None` (see [`super::path::resolve_model_path`]).
    /// The file is brought in as [`LoadMode::Auto`] says.
    pub fn load(path: Option<&Path>) -> Result<Self, ModelError> {
        Self::load_with(path, LoadMode::default())
    }

    /// Loads the model at `path` (or where the model-path rule points), bringing the file in as `mode` says.
    pub fn load_with(path: Option<&Path>, mode: LoadMode) -> Result<Self, ModelError> {
        Self::load_reporting(path, mode, &mut LoadProgress::silent())
    }

    /// Like [`Model::load_with`], reading the file advances `progress` (see [`GgufFile::open_reporting`]).
    pub fn load_reporting(
        path: Option<&Path>,
        mode: LoadMode,
        progress: &mut LoadProgress<'_>,
    ) -> Result<Self, ModelError> {
        Self::load_reporting_with(path, mode, progress, &TemplateChoice::default())
    }

    /// [`Model::load_reporting`] with `template` as the chat template (the file's, or another) and its limits.
    pub fn load_reporting_with(
        path: Option<&Path>,
        mode: LoadMode,
        progress: &mut LoadProgress<'_>,
        template: &TemplateChoice,
    ) -> Result<Self, ModelError> {
        let path = locate_model(path, progress)?;
        let file = GgufFile::open_reporting(&path, mode, progress).map_err(ModelError::Gguf)?;
        Self::from_file_with(path, file, template)
    }

    /// Builds a model from an already opened file (`path` is only reported), with the file's chat template.
    pub fn from_file(path: PathBuf, file: GgufFile) -> Result<Self, ModelError> {
        Self::from_file_with(path, file, &TemplateChoice::default())
    }

    /// [`Model::from_file`] with `template` as the chat template: the file's own is not compiled when another
    /// replaces it.
    pub fn from_file_with(path: PathBuf, file: GgufFile, template: &TemplateChoice) -> Result<Self, ModelError> {
        let config = LlamaConfig::from_gguf(&file).map_err(ModelError::Config)?;
        let tokenizer = Arc::new(Tokenizer::from_gguf(&file).map_err(ModelError::Tokenizer)?);
        let chat_template = template.compile(&file).map_err(ModelError::Template)?;
        Ok(Model { path, file: Arc::new(file), config, tokenizer, chat_template })
    }

    /// The same model with `template` as its chat template (the engine options `chat_template` and
    /// `chat_template_limits`), with the file's bos/eos texts; the weights, hyperparameters and tokenizer are
    /// shared.
    pub fn with_chat_template(&self, template: &TemplateChoice) -> Result<Model, TemplateError> {
        Ok(Model {
            path: self.path.clone(),
            file: Arc::clone(&self.file),
            config: self.config.clone(),
            tokenizer: Arc::clone(&self.tokenizer),
            chat_template: template.compile(&self.file)?,
        })
    }

    /// The model's name (`general.name`), or its file name.
    pub fn name(&self) -> String {
        match self.file.str("general.name") {
            Ok(name) => name.to_owned(),
            Err(_) => self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        }
    }
}
