#pragma once
// llama.cpp's conventions for GGUF files, checked on every file kveval writes
// (test_gguf_conventions.cpp).
//
// The rules below are what llama.cpp (ggml-org/llama.cpp; read in the copy at
// /work/scratch/llama.cpp) checks or assumes when it loads a GGUF of the
// architectures kveval writes (llama, qwen2, qwen3, gemma2, gemma3, granite, phi3); each cites the place in
// its source. The checker reads the file with its own byte-level parser (not
// kveval's gguf::File), so a bug in kveval's reader cannot hide one in its
// writer. A file that breaks a rule either fails to load in llama.cpp (an
// exception or a GGML_ASSERT/ABORT) or loads with a different meaning.
//
// Container (ggml/src/gguf.cpp, gguf_init_from_file_impl):
//   C1 magic "GGUF", version 2 or 3; no duplicate key; no duplicate tensor name;
//      tensor names shorter than GGML_MAX_NAME (64); at most GGML_MAX_DIMS (4) dims.
//   C2 general.alignment, when present, is a UINT32 and a power of two (default 32).
//   C3 the data section starts at the end of the tensor infos rounded up to the alignment.
//   C4 tensor data follow in tensor-info order: each offset equals the sum of the
//      previous tensors' sizes, each rounded up to the alignment ("tensor '%s' has
//      offset %d, expected %d"); the file holds the whole data section.
//   C5 tensor types are ggml types (every type make-model writes: F32, F16, BF16, Q8_0,
//      Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K) and ne[0] is a multiple of the block size.
// Tensor types (conversion/base.py prepare_tensors: "if n_dims <= 1 or
// new_name.endswith('_norm.weight'): data_qtype = F32"; ggml/src/ggml-cpu/binary-ops.cpp
// binary_op aborts on F32 activations times an F16 vector):
//   T1 every 1-D tensor (norms, biases, Q/K norms, rope_freqs) and every
//      *_norm.weight is F32.
// Hyper-parameters ({arch} = general.architecture; src/llama-model.cpp
// llama_model_base::load_hparams, and load_arch_hparams in src/models/llama.cpp,
// qwen2.cpp, qwen3.cpp; src/llama-model-loader.cpp GKV::get_kv throws "key %s has
// wrong type" unless the GGUF type is exactly the expected one):
//   H1 general.architecture is a STRING naming one of the architectures below
//      (src/llama-arch.cpp LLM_ARCH_NAMES: "llama", "qwen2", "qwen3", "gemma2", "gemma3", "granite", "phi3"; the rules of
//      others are not listed here, so their files are reported).
//   H2 {arch}.context_length, {arch}.embedding_length, {arch}.block_count: UINT32, required.
//   H3 {arch}.feed_forward_length, {arch}.attention.head_count: UINT32 (llama.cpp also
//      takes per-layer arrays; kveval writes scalars); needed for the tensor shapes.
//   H4 {arch}.attention.layer_norm_rms_epsilon: FLOAT32, required by all three
//      load_arch_hparams.
//   H5 optional, each of the type given: {arch}.attention.head_count_kv UINT32 dividing
//      head_count; {arch}.rope.freq_base FLOAT32; {arch}.attention.key_length and
//      value_length UINT32 (default embedding_length / head_count), equal; and
//      {arch}.rope.dimension_count UINT32 (default key_length) equal to key_length
//      ("invalid n_rot" in load_hparams for LLM_ARCH_LLAMA; GGML_ASSERT(n_embd_head ==
//      hparams.n_embd_head_k()) and GGML_ASSERT(n_embd_head == n_rot) in the llama,
//      qwen2 and qwen3 graphs); {arch}.vocab_size UINT32 equal to the token count.
// Tokenizer (src/llama-vocab.cpp llama_vocab::impl::load):
//   V1 tokenizer.ggml.model: STRING, required ("llama" = SentencePiece, "gpt2" = BPE).
//   V2 tokenizer.ggml.tokens: ARRAY of STRING, required; the strings are distinct
//      (GGML_ASSERT(id_to_token.size() == token_to_id.size())) and non-empty.
//   V3 tokenizer.ggml.scores: ARRAY of FLOAT32, tokenizer.ggml.token_type: ARRAY of
//      INT32, each with at least one entry per token ("invalid gguf type", "Index out
//      of array bounds").
//   V4 tokenizer.ggml.{bos,eos,unknown}_token_id: UINT32 below the token count (an id
//      out of range is replaced by the default with a "bad special token" warning;
//      llama.cpp's own llama2.c converter writes padding_token_id 0xFFFFFFFF, so
//      only the type of the other *_token_id keys is checked).
//   V5 tokenizer.ggml.add_space_prefix / add_bos_token / add_eos_token: BOOL;
//      add_eos_token false (tools/perplexity/perplexity.cpp GGML_ASSERT(!add_eos)).
//   V6 a SentencePiece vocabulary has the byte token "<0x0A>" (the newline,
//      found with byte_to_token('\n')).
//   V7 a "gpt2" (BPE) vocabulary has tokenizer.ggml.merges, an ARRAY of STRING
//      ("cannot find tokenizer merges in model file", "invalid gguf type for
//      tokenizer.ggml.merges"); tokenizer.ggml.pre, when present, is a STRING.
// Tensors (load_arch_tensors in src/models/llama.cpp, qwen2.cpp, qwen3.cpp, and
// llama_model_base::create_tensor_qkv in src/llama-model.cpp; names from
// src/llama-arch.cpp LLM_TENSOR_NAMES; src/llama-model-loader.cpp create_tensor
// checks each shape, done_getting_tensors throws "wrong number of tensors" for
// tensors it did not use):
//   S1 exactly these tensors, with these ggml dims (hk = key_length, hv =
//      value_length, q = head_count * hk, kv = head_count_kv * hv, n_vocab = the
//      token count; all ".weight" unless ".bias"):
//      every architecture: token_embd {n_embd, n_vocab}, output_norm {n_embd},
//        output {n_embd, n_vocab} (optional: tied to token_embd when absent); per
//        layer attn_norm {n_embd}, attn_k and attn_v {n_embd, kv}, attn_q.bias {q},
//        attn_k.bias and attn_v.bias {kv} (optional), ffn_norm {n_embd}, ffn_gate
//        and ffn_up {n_embd, n_ff}, ffn_down {n_ff, n_embd};
//      llama: attn_q {n_embd, q}, attn_output {q, n_embd}; optional
//        attn_output.bias {n_embd}, ffn_gate.bias and ffn_up.bias {n_ff},
//        ffn_down.bias {n_embd}, and one rope_freqs {n_rot / 2} (Llama 3.1 factors);
//      qwen2: attn_q {n_embd, n_embd}, attn_output {n_embd, n_embd}; optional
//        output.bias {n_vocab};
//      qwen3: attn_q {n_embd, q}, attn_output {q, n_embd}; attn_q_norm and
//        attn_k_norm {hk}, required.
//      gemma2: post_attention_norm and post_ffw_norm {n_embd}, required; no
//        output (token_embd is the output); keys attn_logit_softcapping and
//        final_logit_softcapping FLOAT32, attention.sliding_window UINT32.
//      gemma3: as gemma2 plus attn_q_norm and attn_k_norm {hk} required, output
//        optional; no attn_logit_softcapping; rope.freq_base_swa FLOAT32.
//      granite: as llama; key logit_scale FLOAT32 required, embedding_scale,
//        residual_scale and attention.scale FLOAT32 optional.
//      phi3: attn_qkv {n_embd, n_embd + 2 kv} (optional attn_qkv.bias) and ffn_up
//        {n_embd, 2 n_ff} instead of attn_q/k/v and ffn_gate/ffn_up; attn_output
//        {n_embd, n_embd}; rope.dimension_count even and at most the head size;
//        optional rope_factors_long and rope_factors_short {n_rot / 2}; keys
//        rope.scaling.attn_factor FLOAT32, rope.scaling.original_context_length
//        and attention.sliding_window UINT32.
//      The checker is stricter than llama.cpp in one way: it does not accept the
//      fused attn_qkv that create_tensor_qkv also takes for the other
//      architectures, nor separate attn_q/k/v for phi3 (kveval never writes them).
#include <string>
#include <vector>

namespace kveval::test {

/// Every violation of the rules above in the GGUF file at `path`, one line
/// each, starting with the rule's id ("T1: tensor ... has type 1, ..."); empty
/// when the file follows them all. Never throws: an unreadable file is one
/// "C1: unreadable: ..." line.
std::vector<std::string> llamacpp_violations(const std::string& path);

}  // namespace kveval::test
