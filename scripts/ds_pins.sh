# Sourced by scripts/gpu_prepare.sh and scripts/make_ds_env.sh: the one list of DeepSpeed's pinned versions.
#
# DS_SIDE: DeepSpeed and the dependencies a GPU image lacks, at the versions that import together. The first lent
# H200 (2026-11-30) failed with pydantic's newer code beside an older typing_inspection ("module
# 'typing_inspection.typing_objects' has no attribute 'DEPRECATED_ALIASES_IDS'"): pydantic 2.14 needs
# typing-inspection 0.4.5 (0.4.2 lacks it), so the two travel together, with the rest of pydantic's stack.
DS_SIDE=(
    "deepspeed==0.19.8" "hjson==3.1.0"
    "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" "typing-inspection==0.4.5"
    "typing-extensions==4.16.0"
)
# DS_PINNED: the last versions DeepSpeed's own inference CI ran kernel injection with (DeepSpeed PR #6002):
# transformers 4.42.4, whose GPT-Neo still returns (key, value) tuples; 4.42.4 insists on numpy < 2 at import.
DS_PINNED=("transformers==4.42.4" "tokenizers==0.19.1" "huggingface-hub==0.36.2" "numpy==1.26.4")
