"""A tiny random-weight vision-language checkpoint (Idefics3 / SmolVLM architecture) built locally, for tests.

    <vLLM env python> tests/proxy/tiny_vlm.py TOKENIZER_DIR DEST

Run with the Python of forge's vLLM environment (transformers is there, not in forge's own): the text model is a
2-layer Llama with SmolLM2's tokenizer (from TOKENIZER_DIR) plus Idefics3's image tokens, the vision tower one
layer over 64x64 images in 16x16 patches, pixel-shuffled (scale factor 2) into 4 image tokens per image. Nothing is
downloaded; the weights are random (what matters is the path: request with an image → vLLM's multimodal processor
→ token ids with the image placeholders → the record).
"""

from __future__ import annotations

import sys
from pathlib import Path

IMAGE_SIZE, PATCH, SCALE = 64, 16, 2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // SCALE**2
# ChatML, as SmolLM2's; an image part renders as <image>, which the processor expands to its tokens
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% elif part['type'] in ('image', 'image_url') %}<image>"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build(tokenizer_dir: Path, dest: Path) -> None:
    import torch
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        LlamaConfig,
    )
    from transformers.models.idefics3 import Idefics3ImageProcessorPil

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<fake_token_around_image>", "<image>",
                                                                 "<end_of_utterance>"]})
    tokenizer.add_tokens(["<global-img>"])
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    text = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    vision = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 1,
              "image_size": IMAGE_SIZE, "patch_size": PATCH}
    config = Idefics3Config(text_config=text.to_dict(), vision_config=vision, scale_factor=SCALE,
                            image_token_id=image_token_id, pad_token_id=tokenizer.pad_token_id,
                            tie_word_embeddings=True)
    model = Idefics3ForConditionalGeneration(config).to(torch.float32)
    model.save_pretrained(str(dest))
    images = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": IMAGE_SIZE},
                                       max_image_size={"longest_edge": IMAGE_SIZE})
    processor = Idefics3Processor(images, tokenizer, image_seq_len=IMAGE_SEQ_LEN, chat_template=TEMPLATE)
    processor.save_pretrained(str(dest))
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(str(dest))
    (dest / "chat_template.jinja").write_text(TEMPLATE)


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
