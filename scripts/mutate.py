#!/usr/bin/python3
"""Mutation check of the test suite: small deliberate bugs, one at a time.

Copies the working tree (tracked and untracked, not ignored files) to a scratch directory outside the
repository, builds it once (Release; through ccache when installed) and runs every ctest test, then each
fast-path suite alone (below), as a baseline that must pass. Then, for each mutation: patches one exact snippet of one source file (failing loudly, before
anything is built, when the snippet is not found exactly once), decides whether a test catches it, and
restores the file. Two paths decide:
  suite  the fast path: only the test executables of the mutation's doctest suites are rebuilt
         (cmake --build --target test_<layer>) and only those suites run, each as ctest runs its layer
         (same environment, directory and timeout; --test-suite-exclude=*/stories260K, then the suite's
         <suite>/stories260K cases with --model-part). The suites are Mutation.suites when given, else
         those mirroring the file: <layer>.<stem> and the suites of tests/<layer>/test_<stem>.cpp for
         src/<layer>/.../<stem>.cpp or .hpp. A failing suite (non-zero exit, a crash, a timeout) catches it.
  ctest  otherwise (no suite, every suite passed, or their build failed): the full build and every ctest
         test with --stop-on-failure; a failing test catches it, none SURVIVED. When a doctest suite
         catches it here, the line suggests the suites= hint that makes the next run take the fast path.
Prints one line per mutation (status, time, path, what the bug is), the test cases that caught it, the
count per path and the score; exits 1 if a mutation survived or did not build, 2 when a snippet is missing,
a suites= hint names no suite, or the baseline fails.

Usage: scripts/mutate.py [--list] [--keep] [--full] [--jobs N] [NAME ...]
       (--full: no fast path, the full build and ctest for every mutation)
Env:   KVEVAL_MUTATE_DIR (parent of the scratch copy, default the system temp
       dir), KVEVAL_MODEL (model file, default models/stories260K.gguf),
       CCACHE_DIR. Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Mutation:
    """One deliberate bug: `old` (found exactly once in `path`) becomes `new`. `suites`: the doctest suites
    (`<layer>.<name>`) that catch it, when they are not the one mirroring `path` (tests/<layer>/test_<stem>.cpp)."""

    def __init__(self, name, path, old, new, why, suites=()):
        self.name, self.path, self.old, self.new, self.why = name, path, old, new, why
        self.suites = tuple(suites)


# Bugs a test must catch: stop strings, EOS, attention, norms, RoPE, metrics, kept-block kernels,
# rolling windows, the cache API, architectures. Each replaces
# one exact snippet; keep them meaningful when the code changes.
MUTATIONS = [
    Mutation("stop-search-one-byte-late", "src/eval/runner.cpp",
             "size_t from = before >= st.longest_stop ? before - st.longest_stop + 1 : 0;",
             "size_t from = before >= st.longest_stop ? before - st.longest_stop + 2 : 0;",
             "the incremental stop-string search starts one byte late: a stop whose last byte is the new token's first is missed",
             suites=["eval.stop"]),
    Mutation("stop-cut-from-byte-1", "src/eval/runner.cpp",
             "size_t cut = find_stop(text, r.until);",
             "size_t cut = find_stop(text, r.until, 1);",
             "the final cut searches from byte 1: a stop string at the very start of the output is kept",
             suites=["eval.stop"]),
    Mutation("ignore-eos", "src/model/generate.cpp",
             "if (opts.stop_at_eos && tok.is_eog(t)) g.reason = StopReason::Eos;",
             "if (false && opts.stop_at_eos && tok.is_eog(t)) g.reason = StopReason::Eos;",
             "EOS never stops a generation", suites=["model.eos"]),
    Mutation("tree-mask-sibling-visible", "src/backend/attention_tree.cpp",
             "r = tree.parent_of(r);",
             "r = r - 1;",
             "the tree mask lets other nodes through: a tree query sees the block indices just before it instead of its ancestors",
             suites=["backend.tree_attention"]),
    Mutation("logits-row-off-by-one", "src/model/score.cpp",
             "if (added) in.at.push_back({j, nodes[k]});",
             "if (added) in.at.push_back({j, nodes[k] - 1});",
             "logits row off by one: a packed token is scored from the logits of the node laid out before its own",
             suites=["model.prefix_packing"]),
    Mutation("trie-parent-last-node", "src/model/score.cpp",
             "parent.push_back(node);",
             "parent.push_back(static_cast<int>(tokens.size()) - 2);",
             "the trie hangs a new node off the node added last instead of its own prefix: a request that branches off another shares that one's tokens",
             suites=["model.prefix_packing"]),
    Mutation("attention-scale-loop", "src/backend/attention.cpp",
             "pl.scale = opts.scale_for(head_dim);",
             "pl.scale = 1.0f / std::sqrt(static_cast<float>(head_dim) + 1.0f);",
             "attention scale 1/sqrt(head_dim + 1) in the loop path (short blocks, narrow heads)"),
    Mutation("attention-scale-onednn", "src/backend/attention_matmul.cpp",
             "const float scale = opts.scale_for(HD);",
             "const float scale = 1.0f / std::sqrt(static_cast<float>(HD) + 1.0f);",
             "attention scale 1/sqrt(head_dim + 1) in the oneDNN batched-matmul path (head_dim >= 32, >= 16 queries)",
             suites=["backend.attention"]),
    Mutation("rmsnorm-eps-outside-sqrt", "src/backend/ops.cpp",
             "const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);",
             "const float scale = 1.0f / (std::sqrt(ss / static_cast<float>(dim)) + eps);",
             "RMSNorm computes 1/(sqrt(mean x^2) + eps)"),
    Mutation("log-softmax-no-max", "src/model/score.cpp",
             "  if (!finite) return std::numeric_limits<double>::quiet_NaN();\n",
             "  if (!finite) return std::numeric_limits<double>::quiet_NaN();\n  mx = 0.0f;\n",
             "log-softmax without max subtraction (exp overflows above ~88)", suites=["model.logprob"]),
    Mutation("rope-position-plus-1", "src/backend/ops.cpp",
             "    rope_angles(pos[t], p, cs, sn);",
             "    rope_angles(pos[t] + 1, p, cs, sn);",
             "RoPE rotates every token by its position + 1"),
    Mutation("log-softmax-shift-1e-3", "src/model/score.cpp",
             "return static_cast<double>(logits[static_cast<size_t>(token)]) - mx - std::log(sum);",
             "return static_cast<double>(logits[static_cast<size_t>(token)]) - mx - std::log(sum) - 1e-3;",
             "every log-prob 1e-3 nats too low", suites=["model.logprob"]),
    Mutation("acc-norm-by-bytes", "src/eval/metrics.cpp",
             "int64_t len = bytes ? static_cast<int64_t>(choices[c].size()) : count_chars(choices[c]);",
             "int64_t len = static_cast<int64_t>(choices[c].size());",
             "acc_norm divides by UTF-8 bytes instead of characters (lm-eval's completion_len)"),
    Mutation("rolling-double-count", "src/eval/requests.cpp",
             "r.score_from = static_cast<int>(predicted - start);",
             "r.score_from = static_cast<int>(predicted - start) - 1;",
             "each rolling window after the first scores the previous window's last token again"),
    Mutation("rolling-skip", "src/eval/requests.cpp",
             "r.score_from = static_cast<int>(predicted - start);",
             "r.score_from = static_cast<int>(predicted - start) + 1;",
             "each rolling window after the first skips one token"),
    Mutation("reset-caches-keeps-n-past", "src/model/kv_cache.cpp",
             "  std::fill(n_past_.begin(), n_past_.end(), 0);\n",
             "",
             "reset_caches leaves every row's n_past"),
    Mutation("reset-cache-row-keeps-n-past", "src/model/kv_cache.cpp",
             "  n_past_[static_cast<size_t>(row)] = 0;\n",
             "",
             "reset_cache_row leaves the row's n_past"),
    Mutation("sliding-cache-moves-off-by-one", "src/model/kv_cache.cpp",
             "base + static_cast<size_t>(nb - b) * row_bytes",
             "base + static_cast<size_t>(nb - b + 1) * row_bytes",
             "a sliding layer's cache keeps the positions after those its next query sees (off by one)",
             suites=["model.sliding_cache"]),
    Mutation("rope-model-positions-plus-1", "src/model/forward.cpp",
             "pos[static_cast<size_t>(seq_start[s] + i)] = tree ? static_cast<int32_t>(tree->position(i)) : p0 + i;",
             "pos[static_cast<size_t>(seq_start[s] + i)] = (tree ? static_cast<int32_t>(tree->position(i)) : p0 + i) + 1;",
             "the model gives RoPE positions shifted by one (invisible in logits, visible in the cached keys)",
             suites=["model.reference_forward"]),
    Mutation("stop-search-from-byte-1", "src/eval/runner.cpp",
             "size_t from = before >= st.longest_stop ? before - st.longest_stop + 1 : 0;",
             "size_t from = before >= st.longest_stop ? before - st.longest_stop + 1 : 1;",
             "the incremental stop search skips byte 0: generation runs on past a leading stop string",
             suites=["eval.stop"]),
    Mutation("runner-ignores-eos", "src/eval/runner.cpp",
             "go.stop_at_eos = true;",
             "go.stop_at_eos = false;",
             "the runner turns EOS handling off",
             suites=["eval.stop"]),
    Mutation("regex-negative-group-select-as-0", "src/eval/filters.cpp",
             "g = s.group_select < 0 ? s.group_select + n : s.group_select;",
             "g = s.group_select < 0 ? 0 : s.group_select;",
             "a regex filter reads a negative group_select as 0: the first match instead of the last (gsm8k flexible-extract)"),
    Mutation("regex-too-few-matches-dropped", "src/eval/filters.cpp",
             "        r = s.fallback;\n        continue;\n      }\n      const auto& m",
             "        throw SpecError(\"group_select past the matches\");\n      }\n      const auto& m",
             "a regex filter whose group_select finds too few matches drops the document instead of using its fallback"),
    # architectures
    Mutation("neox-rope-as-normal", "src/model/model_load.cpp",
             "hp.rope_style == arch::RopeStyle::Neox, hp.rope_attn_factor};",
             "false, hp.rope_attn_factor};",
             "qwen2/qwen3 rotate adjacent pairs instead of (i, i + n_rot/2)", suites=["model.arch"]),
    Mutation("qkv-bias-ignored", "src/model/forward.cpp",
             "if (!L.bqkv.empty()) be::add_bias(q, L.bqkv.data(), Ti, QS);",
             "",
             "the Q/K/V biases (qwen2) are never added", suites=["model.arch"]),
    Mutation("qk-norm-ignored", "src/model/forward.cpp",
             "if (!L.q_norm.empty()) {  // per-head RMSNorm before RoPE (qwen3)",
             "if (false) {",
             "qwen3's per-head Q/K RMSNorm is skipped", suites=["model.arch"]),
    Mutation("rope-freqs-ignored", "src/model/model_load.cpp",
             "hp.rope_freq_factors ? im.rope_factors.data() : nullptr,",
             "nullptr,",
             "the rope_freqs.weight factors (Llama 3.1) are read but not applied", suites=["model.arch"]),
    Mutation("sliding-window-one-short", "src/backend/backend.hpp",
             "return window > 0 && pos + 1 > window ? pos + 1 - window : 0;",
             "return window > 0 && pos + 2 > window ? pos + 2 - window : 0;",
             "a sliding-window query sees one position fewer than the window", suites=["backend.attention"]),
    Mutation("attention-softcap-ignored-loop", "src/backend/attention.cpp",
             "  if (softcap <= 0.0f) return;\n",
             "  return;\n",
             "the attention soft-cap is skipped on the AVX-512 head kernel and the position-major loop"),
    Mutation("post-norm-ignored", "src/model/forward.cpp",
             "if (!post_norm.empty()) be::rmsnorm(",
             "if (false) be::rmsnorm(",
             "the post-attention and post-FFN norms (Gemma 2/3) are skipped", suites=["model.recipe"]),
    Mutation("rope-linear-scale-ignored", "src/model/read_hparams.cpp",
             "hp.rope_freq_scale = (type == \"none\" || factor == 0.0) ? 1.0f : static_cast<float>(1.0 / factor);",
             "hp.rope_freq_scale = 1.0f;",
             "linear rope scaling (rope.scaling.factor) is ignored", suites=["model.arch"]),
    Mutation("group-mean-unweighted", "src/eval/groups.cpp",
             "const double w = weight_by_size ? static_cast<double>(sizes[i]) : 1.0;",
             "const double w = 1.0;",
             "a group with weight_by_size averages its subtasks unweighted"),
    Mutation("group-stderr-pooled-without-size", "src/eval/groups.cpp",
             "var += (n - 1) * stderrs[i] * stderrs[i] * n;",
             "var += (n - 1) * stderrs[i] * stderrs[i];",
             "the pooled group stderr drops lm-eval's n_i factor of each subtask's variance"),
    Mutation("fewshot-config-delimiters-ignored", "src/eval/task_docs.cpp",
             "const std::string fewshot_delimiter = t.fewshot_fewshot_delimiter.value_or(t.fewshot_delimiter);",
             "const std::string fewshot_delimiter = t.fewshot_delimiter;",
             "few-shot examples are joined by the task's fewshot_delimiter, not fewshot_config's",
             suites=["eval.fewshot_lm_eval"]),
    Mutation("fewshot-gen-prefix-always-spaced", "src/eval/chat_context.cpp",
             "return requires_delimiter(prefix, suffix) ? prefix + delimiter + suffix : prefix + suffix;",
             "return prefix + delimiter + suffix;",
             "a few-shot example's gen_prefix and target are always joined by a space, whitespace at the join or not"),
    Mutation("question-prefix-always-delimited", "src/eval/chat_context.cpp",
             "return fewshot_turn(question, \"\", gen_prefix, target_delimiter, \"\");",
             "return {question, gen_prefix ? target_delimiter : \"\", gen_prefix, \"\"};",
             "the evaluated document's gen_prefix always follows target_delimiter (lm-eval v0.4.9's ending), "
             "whitespace at the join or an empty prefix"),
    Mutation("chat-continuation-delimiter-dropped", "src/eval/requests.cpp",
             "const std::string delim = keep ? t.target_delimiter : std::string();",
             "const std::string delim = t.chat_template ? std::string() : t.target_delimiter;",
             "under a chat template continuations lose target_delimiter also after a gen_prefix not ending in whitespace"),
    Mutation("fewshot-config-gen-prefix-ignored", "src/eval/task_docs.cpp",
             "const bool own = t.fewshot_gen_prefix.has_value();",
             "const bool own = false;",
             "few-shot examples take the task's gen_prefix, not fewshot_config's"),
    Mutation("hub-doc-keys-sorted", "src/eval/lm_eval_hub.cpp",
             "  order.docs = std::move(rows[eval_split]);\n  t[\"docs\"] = json::parse(order.docs.dump());",
             "  t[\"docs\"] = json::parse(rows[eval_split].dump());",
             "a Hub dataset's rows lose their column order: the samples' doc lists the keys sorted, doc_hash differs"),
    Mutation("gemma2-attn-softcap-off", "src/model/arch/gemma2.cpp",
             ".attn_softcap = {.key = \"attn_logit_softcapping\", .required = true, .positive = true},",
             ".attn_softcap = {},",
             "gemma2's attention logit soft-cap is never read, so never applied"),
    Mutation("gemma2-odd-layers-slide", "src/model/arch/gemma2.cpp",
             ".sliding_layer = [](int layer) { return layer % 2 == 0; },",
             ".sliding_layer = [](int layer) { return layer % 2 == 1; },",
             "gemma2's sliding window is applied to the odd layers instead of the even ones"),
    Mutation("final-softcap-ignored", "src/model/forward.cpp",
             "if (hp.logit_scale == 0.0f && hp.final_softcap == 0.0f) return;",
             "if (hp.logit_scale == 0.0f) return;",
             "the final logit soft-cap (Gemma 2) is skipped when there is no logit scale", suites=["model.gemma2"]),
    Mutation("granite-residual-scale-dropped", "src/model/arch/granite.cpp",
             ".residual_scale = {.key = \"residual_scale\"},",
             ".residual_scale = {},",
             "granite's residual_scale is never read, so its branches join the residual stream unscaled"),
    Mutation("longrope-sets-swapped", "src/model/model_load.cpp",
             "return use_long ? long_f : short_f;",
             "return use_long ? short_f : long_f;",
             "LongRoPE uses the short factors past original_context_length and the long ones within it",
             suites=["model.phi3"]),
    Mutation("gate-up-halves-swapped", "src/backend/ops.cpp",
             "for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + detail::simd_exp(-g[i])) * u[i];",
             "for (int64_t i = 0; i < n; ++i) o[i] = u[i] / (1.0f + detail::simd_exp(-u[i])) * g[i];",
             "SwiGLU takes the second half of [gate | up] (Phi-3's fused ffn_up) as the gate"),
    Mutation("q4_1-nibble-order", "src/backend/file_qblocks.cpp",
             "const __m512i lo = _mm512_and_si512(q, _mm512_set1_epi32(15)), hi = _mm512_srli_epi32(q, 4);",
             "const __m512i hi = _mm512_and_si512(q, _mm512_set1_epi32(15)), lo = _mm512_srli_epi32(q, 4);",
             "the Q4_1 kernel takes a block's high nibbles for elements 0-15 and the low ones for 16-31",
             suites=["backend.file_blocks"]),
    Mutation("q5_0-high-bit-index", "src/backend/file_qblocks.cpp",
             "quants5(b + 6, load_u32(b + 2), lo, hi);",
             "quants5(b + 6, load_u32(b + 2) >> 1, lo, hi);",
             "the Q5_0 kernel gives element j the fifth bit of element j + 1", suites=["backend.file_blocks"]),
    Mutation("q5_1-qh-offset", "src/backend/file_qblocks.cpp",
             "quants5(b + 8, load_u32(b + 4), lo, hi);",
             "quants5(b + 8, load_u32(b + 3), lo, hi);",
             "the Q5_1 kernel reads qh one byte early (into m)", suites=["backend.file_blocks"]),
    Mutation("q2_k-min-index", "src/backend/kquants.cpp",
             "sink.template add<1>(g + 1, val(q1, 2 * k, d1[g + 1], m1[g + 1]));",
             "sink.template add<1>(g + 1, val(q1, 2 * k, d1[g + 1], m1[g]));",
             "the Q2_K kernel subtracts the even sub-block's min in the odd one", suites=["backend.file_blocks"]),
    Mutation("q3_k-hmask-bit", "src/backend/kquants.cpp",
             "sink.template add<0>(g, val(q0, hm0, 2 * k, 4 * h + k, d1[g]));",
             "sink.template add<0>(g, val(q0, hm0, 2 * k, 4 * k + h, d1[g]));",
             "the Q3_K kernel reads the hmask bit of another group for the even groups",
             suites=["backend.file_blocks"]),
    Mutation("q4_k-min-index", "src/backend/kquants.cpp",
             "sink.template add<1>(4 * c + 1, _mm512_sub_ps(_mm512_mul_ps(da, _mm512_cvtepi32_ps(_mm512_and_si512(q1, lo4))), ma));",
             "sink.template add<1>(4 * c + 1, _mm512_sub_ps(_mm512_mul_ps(da, _mm512_cvtepi32_ps(_mm512_and_si512(q1, lo4))), mb));",
             "the Q4_K kernel subtracts the next sub-block's min from elements 16-31 of a sub-block",
             suites=["backend.file_blocks"]),
    Mutation("q5_k-high-bit-index", "src/backend/kquants.cpp",
             "const __m512i b1 = _mm512_or_si512(_mm512_srli_epi32(q1, 4), hbit(h1, sb, one));",
             "const __m512i b1 = _mm512_or_si512(_mm512_srli_epi32(q1, 4), hbit(h1, sa, one));",
             "the Q5_K kernel takes the previous sub-block's fifth bit for elements 16-31 of odd sub-blocks",
             suites=["backend.file_blocks"]),
    Mutation("q6_k-scale-index", "src/backend/kquants.cpp",
             "sink.template add<P>(g + 4, val(_mm512_srli_epi32(lo0, 4), _mm512_and_si512(_mm512_srli_epi32(hi, 4), m2), sc[P + 4]));",
             "sink.template add<P>(g + 4, val(_mm512_srli_epi32(lo0, 4), _mm512_and_si512(_mm512_srli_epi32(hi, 4), m2), sc[P + 6]));",
             "the Q6_K kernel scales groups 4-5 of each half by groups 6-7's scales", suites=["backend.file_blocks"]),
    Mutation("int8-q4k-min-term-dropped", "src/backend/int8_kquants.cpp",
             "const int32_t mi = sm[8 + 2 * i] * b32[2 * i] + sm[9 + 2 * i] * b32[2 * i + 1];",
             "const int32_t mi = 0 * (sm[8 + 2 * i] * b32[2 * i] + sm[9 + 2 * i] * b32[2 * i + 1]);",
             "the scalar int8 Q4_K/Q5_K product drops the mins' term (dmin * m * bsums) of every super-block",
             suites=["backend.int8_dot"]),
    Mutation("int8-q6k-offset-31", "src/backend/int8_kquants.cpp",
             "lane[q6k_lane(e)] += sc[e / 16] * ((lo | hi << 4) - 32) * xq[e];",
             "lane[q6k_lane(e)] += sc[e / 16] * ((lo | hi << 4) - 31) * xq[e];",
             "the scalar int8 Q6_K product centres the 6-bit quants on 31 instead of 32", suites=["backend.int8_dot"]),
    Mutation("int8-q6k-vnni-scale-group", "src/backend/int8_kquants.cpp",
             "8 * h + 4 * ((j % 4) / 2) + j / 4",
             "8 * h + 4 * ((j % 4) / 2) + (j / 4 ^ 1)",
             "the VNNI int8 Q6_K product applies the scales of the neighbouring 16 elements",
             suites=["backend.int8_dot"]),
    Mutation("int8-q4k-kmask-scales", "src/backend/int8_kquants.cpp",
             "u[0] &= k1;",
             "u[0] &= k2;",
             "the int8 Q4_K/Q5_K scale decoding keeps 4 instead of 6 bits of sub-blocks 0-3's scales",
             suites=["backend.int8_dot"]),
    Mutation("int8-q4k-vnni-kmask-mins-high", "src/backend/int8_kquants.cpp",
             "_mm_setr_epi32(0, 0x30303030, 0, 0x30303030)",
             "_mm_setr_epi32(0, 0x30303030, 0, 0)",
             "the VNNI int8 Q4_K/Q5_K scale decoding drops the top 2 bits of sub-blocks 4-7's mins",
             suites=["backend.int8_dot"]),
    Mutation("int8-q4k-vnni-mins-lanes", "src/backend/int8_kquants.cpp",
             "wb.mins = _mm256_extracti128_si256(sm16, 1);",
             "wb.mins = _mm256_castsi256_si128(sm16);",
             "the VNNI int8 Q4_K/Q5_K product multiplies the activation sums by the scales instead of the mins",
             suites=["backend.int8_dot"]),
    Mutation("int8-q8_0-vnni-odd-block-scale", "src/backend/int8_dot.cpp",
             "_mm256_set1_ps(d[(b + 1) * kQGroup] * xd[b + 1])",
             "_mm256_set1_ps(d[b * kQGroup] * xd[b + 1])",
             "the VNNI int8 Q8_0 product scales each odd block by the even block's weight scale"),
    Mutation("int8-q8k-bsums-short", "src/backend/int8_dot.cpp",
             "for (int l = 0; l < 16; ++l) s += q[16 * g + l];",
             "for (int l = 0; l < 15; ++l) s += q[16 * g + l];",
             "quantize_row_q8_K's 16-element sums leave out each group's last quant"),
    Mutation("int8-q4_0-vnni-offset-7", "src/backend/int8_dot.cpp",
             "_mm512_dpbusd_epi32(zero, _mm512_set1_epi8(8), x)",
             "_mm512_dpbusd_epi32(zero, _mm512_set1_epi8(7), x)",
             "the VNNI int8 Q4_0 product subtracts 7 instead of 8 from every nibble"),
    Mutation("int8-q5k-high-bit-3", "src/backend/int8_kquants.cpp",
             "if constexpr (Five) q |= ((qh[e % 32] >> (e / 32)) & 1) << 4;",
             "if constexpr (Five) q |= ((qh[e % 32] >> (e / 32)) & 1) << 3;",
             "the scalar int8 Q5_K product reads the fifth bit as 8 instead of 16", suites=["backend.int8_dot"]),
    Mutation("bf16-pack-round-half-up", "src/backend/bf16_panels.cpp",
             "_mm512_and_si512(_mm512_srli_epi32(x, 16), one)",
             "_mm512_and_si512(_mm512_srli_epi32(x, 17), one)",
             "the AVX-512 panel pack rounds ties by the wrong bit: some weights widened for bf16 products are off by one bf16 ulp"),
    Mutation("bf16-pack-transpose-lanes", "src/backend/bf16_panels.cpp",
             "r[4 + c] = _mm512_shuffle_i32x4(b, d, 0x88);",
             "r[4 + c] = _mm512_shuffle_i32x4(d, b, 0x88);",
             "the AVX-512 panel pack swaps rows 0-7 and 8-15 of pairs 4-7 of each 16: weights land in the wrong columns"),
]


def run(cmd, cwd, log, env=None, timeout=None):
    """Runs `cmd`, appending its output to `log`; returns (exit code, output). Raises
    subprocess.TimeoutExpired after `timeout` seconds (the process is killed)."""
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        with open(log, "a") as f:
            f.write("$ " + " ".join(cmd) + f"\nTIMEOUT after {timeout:.0f} s\n")
        raise
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout + "\n")
    return p.returncode, p.stdout


def copy_tree(dst):
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           stdout=subprocess.PIPE).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue  # deleted in the work tree
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))


def catchers(output):
    """The failing ctest tests, doctest test cases and doctest suites named in ctest or doctest output. doctest
    prints a case's header (TEST SUITE:, TEST CASE:) for a MESSAGE or WARN too: only blocks (between its ====
    lines) that report an ERROR or FATAL ERROR (failed checks, exceptions, crashes) name a failing case."""
    tests = re.findall(r"^\s*\d+ - (\S+) \((?:Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Child aborted)",
                       output, re.M)
    cases, suites = [], []
    for block in re.split(r"^={20,}$", output, flags=re.M):
        if not re.search(r"^\S.*?: (?:FATAL )?ERROR: ", block, re.M):
            continue
        for found, pattern in ((cases, r"^TEST CASE:\s+(.*)$"), (suites, r"^TEST SUITE:\s+(.*)$")):
            for c in re.findall(pattern, block, re.M):
                if c.strip() not in found:
                    found.append(c.strip())
    return tests, cases, suites


SUITE_DECL = re.compile(r"\bTEST_SUITE(?:_BEGIN)?\(\s*\"([^\"]+)\"")
MODEL_SUFFIX = "/stories260K"  # tests/test_skip.hpp: the suite of a suite's needs_model() cases
MODEL_FILTER = "--test-suite=*" + MODEL_SUFFIX  # the filter of ctest's <layer>.stories260K tests
CTEST_TIMEOUT = 300  # ctest --timeout: the limit of a test without a TIMEOUT property


def declared_suites(layer):
    """{tests/<layer>/... file: the doctest suites it declares, in order} from the test sources."""
    found = {}
    for d, _, names in os.walk(os.path.join(ROOT, "tests", layer)):
        for n in sorted(names):
            if n.endswith(".cpp"):
                text = open(os.path.join(d, n)).read()
                found[os.path.relpath(os.path.join(d, n), ROOT)] = list(dict.fromkeys(SUITE_DECL.findall(text)))
    return found


def fast_suites(m):
    """The doctest suites of m's fast path: m.suites, else those mirroring m.path = src/<layer>/.../<stem>.cpp
    (or .hpp): the suite <layer>.<stem> and every suite of tests/<layer>/test_<stem>.cpp; [] when none."""
    if m.suites:
        return list(m.suites)
    parts = m.path.split("/")
    layer, stem = parts[1], os.path.splitext(parts[-1])[0]
    declared = declared_suites(layer)
    out = list(declared.get(f"tests/{layer}/test_{stem}.cpp", []))
    if f"{layer}.{stem}" not in out and any(f"{layer}.{stem}" in v for v in declared.values()):
        out.insert(0, f"{layer}.{stem}")
    return out


def unknown_hints(chosen):
    """One line per suites= entry that no TEST_SUITE of tests/<layer>/ declares."""
    bad = []
    for m in chosen:
        for s in m.suites:
            layer = s.split(".")[0]
            if not any(s in v for v in declared_suites(layer).values()):
                bad.append(f"{m.name}: suites= names {s}, which no TEST_SUITE in tests/{layer}/ declares")
    return bad


class CtestTest:
    """One test as `ctest --show-only=json-v1` describes it: command, environment, directory, limits."""

    def __init__(self, t, build):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        self.name, self.command = t["name"], list(t.get("command") or [])
        self.env = dict(e.split("=", 1) for e in props.get("ENVIRONMENT", []))
        self.cwd = props.get("WORKING_DIRECTORY", build)
        self.timeout = float(props.get("TIMEOUT", CTEST_TIMEOUT))
        self.skip_code = props.get("SKIP_RETURN_CODE")
        # pass/fail decided by the exit code alone: the fast path can repeat ctest's verdict
        self.plain = not ({"PASS_REGULAR_EXPRESSION", "FAIL_REGULAR_EXPRESSION", "SKIP_REGULAR_EXPRESSION",
                           "WILL_FAIL"} & props.keys())


def ctest_tests(build, log, env):
    """{name: CtestTest} of every test of the build."""
    rc, out = run(["ctest", "--test-dir", build, "--show-only=json-v1"], build, log, env)
    if rc != 0:
        raise RuntimeError(f"ctest --show-only failed (see {log})")
    return {t["name"]: CtestTest(t, build) for t in json.loads(out[out.index("{"):])["tests"]}


def listed_suites(t, log, env):
    """The doctest suites of the executable of ctest test t (`--list-test-suites`), model suites included."""
    rc, out = run([t.command[0], "--list-test-suites"], t.cwd, log, {**env, **t.env}, timeout=t.timeout)
    return set(re.findall(r"^([A-Za-z0-9_.]+(?:/[A-Za-z0-9_]+)?)$", out, re.M)) if rc == 0 else set()


def fast_runs(m, tests, listings):
    """[(suite, ctest test, command)] of m's fast path: each suite of fast_suites(m) that its layer's executable
    has, run as ctest runs that executable (environment, directory, timeout; `<layer>` excludes */stories260K,
    `<layer>.stories260K` takes --model-part) with --test-suite narrowed to the suite; then its model part."""
    runs = []
    for s in fast_suites(m):
        layer = s.split(".")[0]
        for suite, name in ((s, layer), (s + MODEL_SUFFIX, layer + MODEL_SUFFIX.replace("/", "."))):
            t = tests.get(name)
            if t is None or not t.plain or not t.command or suite not in listings.get(t.command[0], ()):
                continue
            if suite == s:
                runs.append((suite, t, t.command + [f"--test-suite={suite}"]))
            elif MODEL_FILTER in t.command:
                runs.append((suite, t, [f"--test-suite={suite}" if c == MODEL_FILTER else c for c in t.command]))
    return runs


def fast_path(runs, build, jobs, env, log):
    """Builds only the test executables of `runs` (CMake targets test_<layer> and their dependencies) and runs
    the suites in order until one fails (non-zero exit, a crash or the test's timeout; ctest's skip code is a
    pass). Returns (suite, failing test cases) for a failure, else why not: "passed" or "did not build"."""
    targets = sorted({"test_" + suite.split(".")[0] for suite, _, _ in runs})
    rc, _ = run(["cmake", "--build", build, "-j", str(jobs), "--target", *targets], build, log, env)
    if rc != 0:
        return "did not build"  # the full build says why
    for suite, t, cmd in runs:
        try:
            rc, out = run(cmd, t.cwd, log, {**env, **t.env}, timeout=t.timeout)
        except subprocess.TimeoutExpired:
            return suite, [f"timeout after {t.timeout:.0f} s"]
        if rc != 0 and not (t.skip_code is not None and rc == int(t.skip_code)):
            return suite, catchers(out)[1]
    return "passed"


def full_path(build_cmd, test_cmd, scratch, env, log):
    """The whole build and every ctest test up to the first failure: (status, tests, cases, suites)."""
    rc, out = run(build_cmd, scratch, log, env)
    if rc != 0:
        return "BUILD FAILED", [], [], []
    try:
        rc, out = run(test_cmd + ["--stop-on-failure"], scratch, log, env, timeout=1800)
    except subprocess.TimeoutExpired:
        rc, out = 1, "TIMEOUT"
    tests, cases, suites = catchers(out)
    return ("caught" if rc != 0 else "SURVIVED"), tests, cases, suites


def report(m, status, how, seconds, tests, cases, hint):
    print(f"{status:12} {m.name:30} ({seconds:.0f} s, {how}) {m.why}", flush=True)
    if cases:
        shown = cases[:4] + ([f"... {len(cases) - 4} more"] if len(cases) > 4 else [])
        print(f"{'':12} by {', '.join(tests)}: " + "; ".join(shown), flush=True)
    if hint:
        print(f"{'':12} suites= hint for a fast next run: {hint}", flush=True)


def try_mutation(m, ctx):
    """Applies m in the scratch copy, decides caught/SURVIVED/BUILD FAILED, restores the file, prints the
    result; returns (status, path) with path "suite" (its fast path) or "ctest" (the full build and ctest)."""
    t1 = time.time()
    path = os.path.join(ctx.scratch, m.path)
    original = open(path).read()
    with open(path, "w") as f:
        f.write(original.replace(m.old, m.new, 1))
    try:
        runs = [] if ctx.full else fast_runs(m, ctx.tests, ctx.listings)
        fast = fast_path(runs, ctx.build, ctx.jobs, ctx.env, ctx.log) if runs else None
        if isinstance(fast, tuple):
            report(m, "caught", f"suite {fast[0]}", time.time() - t1, [fast[0]], fast[1], None)
            return "caught", "suite"
        status, tests, cases, suites = full_path(ctx.build_cmd, ctx.test_cmd, ctx.scratch, ctx.env, ctx.log)
    finally:
        with open(path, "w") as f:
            f.write(original)
    how = "full ctest"
    if runs:
        how += f"; {', '.join(dict.fromkeys(s for s, _, _ in runs))} {fast}"
    elif not ctx.full:
        how += "; no suite for the fast path"
    bases = list(dict.fromkeys(s.removesuffix(MODEL_SUFFIX) for s in suites))
    hint = "suites=[" + ", ".join(f'"{s}"' for s in bases) + "]" if status == "caught" and bases else None
    report(m, status, how, time.time() - t1, tests, cases, hint)
    return status, "ctest"


def refuse_upfront(chosen):
    """Lines for every snippet not found exactly once and every unknown suites= hint."""
    missing = []
    for m in chosen:
        n = open(os.path.join(ROOT, m.path)).read().count(m.old)
        if n != 1:
            missing.append(f"{m.name}: {m.path}: snippet found {n} times: {m.old!r}")
    return missing + unknown_hints(chosen)


def baseline(ctx, configure):
    """Configures, builds everything, runs every ctest test (all must pass, none skipped) and reads the tests and
    the suites of their executables. Returns an error message or None."""
    for cmd in (configure, ctx.build_cmd):
        rc, out = run(cmd, ctx.scratch, ctx.log, ctx.env)
        if rc != 0:
            return f"mutate: baseline build failed (see {ctx.log})"
    rc, out = run(ctx.test_cmd, ctx.scratch, ctx.log, ctx.env)
    skipped = re.findall(r"\(Skipped\)", out)
    if rc != 0 or skipped:
        return f"mutate: the unmutated tree does not pass every test ({len(skipped)} skipped; see {ctx.log})"
    ctx.tests = ctest_tests(ctx.build, ctx.log, ctx.env)
    ctx.listings = {}
    for t in ctx.tests.values():
        if t.command and os.path.basename(t.command[0]).startswith("test_") and t.command[0] not in ctx.listings:
            ctx.listings[t.command[0]] = listed_suites(t, ctx.log, ctx.env)
    return None


def suites_pass_alone(ctx, chosen):
    """Runs each suite of the chosen mutations' fast paths once on the unmutated tree: a suite that fails alone
    (an order dependence the full ctest run hides) would catch every bug. Returns an error message or None."""
    seen = set()
    for m in [] if ctx.full else chosen:
        for suite, t, cmd in fast_runs(m, ctx.tests, ctx.listings):
            if tuple(cmd) not in seen:
                seen.add(tuple(cmd))
                if isinstance(fast_path([(suite, t, cmd)], ctx.build, ctx.jobs, ctx.env, ctx.log), tuple):
                    return f"mutate: suite {suite} fails alone on the unmutated tree (see {ctx.log})"
    return None


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="run only these mutations")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    ap.add_argument("--full", action="store_true", help="no fast path: the full build and ctest for every mutation")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    return ap.parse_args()


def main():
    a = parse_args()
    if a.list:
        for m in MUTATIONS:
            print(f"{m.name:30} {m.path:24} {m.why}")
        return 0
    chosen = [m for m in MUTATIONS if not a.names or m.name in a.names]
    unknown = set(a.names) - {m.name for m in MUTATIONS}
    if unknown:
        print("mutate: unknown mutation(s): " + ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    # Every snippet must be found exactly once, every hint must name a suite, before anything is built.
    missing = refuse_upfront(chosen)
    if missing:
        print("mutate: the code changed; update these mutations:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 2

    model = os.path.abspath(os.environ.get("KVEVAL_MODEL", os.path.join(ROOT, "models", "stories260K.gguf")))
    if not os.path.isfile(model):
        print(f"mutate: model file {model} not found (run scripts/fetch-model.sh): most tests would be skipped",
              file=sys.stderr)
        return 2
    ctx = argparse.Namespace(full=a.full, jobs=a.jobs)
    ctx.scratch = tempfile.mkdtemp(prefix="kveval-mutate-", dir=os.environ.get("KVEVAL_MUTATE_DIR",
                                                                                tempfile.gettempdir()))
    ctx.log = os.path.join(ctx.scratch, "mutate.log")
    ctx.env = dict(os.environ)
    ctx.env.setdefault("CCACHE_DIR", os.path.join(os.path.dirname(ROOT), ".ccache"))
    ctx.env["CCACHE_BASEDIR"] = os.path.commonpath([ROOT, ctx.scratch])  # same relative paths: cache hits across trees
    print(f"mutate: scratch copy {ctx.scratch} (log {ctx.log})", flush=True)
    try:
        copy_tree(ctx.scratch)
        ctx.build = os.path.join(ctx.scratch, "build")
        configure = ["cmake", "-S", ctx.scratch, "-B", ctx.build, "-DCMAKE_BUILD_TYPE=Release",
                     *(["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []),
                     f"-DKVEVAL_TEST_MODEL={model}",
                     f"-DKVEVAL_TEST_SHARED={os.path.join(os.path.dirname(ROOT), 'shared')}"]
        ctx.build_cmd = ["cmake", "--build", ctx.build, "-j", str(a.jobs)]
        ctx.test_cmd = ["ctest", "--test-dir", ctx.build, "-j", str(a.jobs), "--output-on-failure",
                        "--timeout", str(CTEST_TIMEOUT)]
        t0 = time.time()
        error = baseline(ctx, configure) or suites_pass_alone(ctx, chosen)
        if error:
            print(error, file=sys.stderr)
            return 2
        print(f"mutate: baseline built and passing ({time.time() - t0:.0f} s)", flush=True)
        results = [try_mutation(m, ctx) for m in chosen]
        caught = sum(1 for status, _ in results if status == "caught")
        by_suite = sum(1 for r in results if r == ("caught", "suite"))
        print(f"\npaths: {by_suite} caught by their suite, {caught - by_suite} by the full ctest; "
              f"{sum(1 for s, _ in results if s == 'SURVIVED')} survived, "
              f"{sum(1 for s, _ in results if s == 'BUILD FAILED')} did not build")
        print(f"mutation score: {caught}/{len(results)} caught "
              f"({time.time() - t0:.0f} s in all)")
        return 0 if caught == len(results) else 1
    finally:
        if a.keep:
            print(f"mutate: kept {ctx.scratch}")
        else:
            shutil.rmtree(ctx.scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
