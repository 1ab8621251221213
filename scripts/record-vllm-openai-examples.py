#!/usr/bin/env python3
"""Records what vLLM's own OpenAI server classes produce, as the reference `pagedkv serve` is
tested against (tests/data/serve/vllm_openai_examples.json). Run outside CI, with the vllm wheel:

    /work/venv-vllm/bin/python scripts/record-vllm-openai-examples.py > tests/data/serve/vllm_openai_examples.json

Each object is built the way vLLM 0.33.0's handlers build it (file named beside each), with
vLLM's pydantic classes and the same dump options; no model is loaded. Ids and `created` are
whatever vLLM draws: the tests compare keys, types and the deterministic values only."""

import asyncio
from http import HTTPStatus
import json
import sys
import types

import vllm
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
)
from vllm.entrypoints.generate.base.protocol import DeltaMessage
from vllm.entrypoints.openai.completion.protocol import (
    CompletionRequest,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
)
from vllm.entrypoints.serve.engine.protocol import ModelCard, ModelList, UsageInfo
from vllm.entrypoints.serve.exception_handling.error_response import (
    create_error_response,
)
from vllm.entrypoints.serve.exception_handling.handlers.validation import (
    validation_exception_handler,
)
from vllm.renderers.params import TokenizeParams

MODEL = "llama-3.1-8b"
out = {"vllm_version": vllm.__version__}
usage = UsageInfo(prompt_tokens=5, completion_tokens=3, total_tokens=8)

# completion/serving.py, request_output_to_completion_response: returned as JSONResponse(
# content=response.model_dump()).
out["completion_response"] = CompletionResponse(
    id="cmpl-x",
    created=0,
    model=MODEL,
    choices=[
        CompletionResponseChoice(
            index=0,
            text=" the the the",
            logprobs=None,
            finish_reason="length",
            stop_reason=None,
            prompt_logprobs=None,
            prompt_token_ids=None,
            token_ids=None,
        )
    ],
    usage=usage,
    kv_transfer_params=None,
).model_dump()

# completion/serving.py, completion_stream_generator: model_dump_json(exclude_unset=True).
def completion_chunk(text, finish_reason):
    return json.loads(
        CompletionStreamResponse(
            id="cmpl-x",
            object="text_completion",
            created=0,
            model=MODEL,
            choices=[
                CompletionResponseStreamChoice(
                    index=0,
                    text=text,
                    logprobs=None,
                    finish_reason=finish_reason,
                    stop_reason=None,
                    prompt_token_ids=None,
                    token_ids=None,
                    weight_versions=None,
                )
            ],
            kv_transfer_params=None,
        ).model_dump_json(exclude_unset=True)
    )

out["completion_chunk"] = completion_chunk(" the", None)
out["completion_last_chunk"] = completion_chunk(" the", "length")
# The usage chunk: model_dump_json(exclude_unset=False, exclude_none=True).
out["completion_usage_chunk"] = json.loads(
    CompletionStreamResponse(
        id="cmpl-x", created=0, model=MODEL, choices=[], usage=usage,
        system_fingerprint=None, metrics=None,
    ).model_dump_json(exclude_unset=False, exclude_none=True)
)

# chat_completion/serving.py, chat_completion_full_generator: JSONResponse(response.model_dump()).
out["chat_response"] = ChatCompletionResponse(
    id="chatcmpl-x",
    created=0,
    model=MODEL,
    choices=[
        ChatCompletionResponseChoice(
            index=0,
            message=ChatMessage(role="assistant", content=" the the the"),
            logprobs=None,
            finish_reason="length",
            stop_reason=None,
            token_ids=None,
        )
    ],
    usage=usage,
    system_fingerprint=None,
    prompt_logprobs=None,
    prompt_token_ids=None,
    prompt_text=None,
    kv_transfer_params=None,
    ec_transfer_params=None,
    metrics=None,
).model_dump()

# chat_completion/serving.py, chat_completion_stream_generator:
# model_dump_json(exclude_unset=True, exclude_none=not chunk.choices).
def chat_chunk(choices, **kw):
    c = ChatCompletionStreamResponse(
        id="chatcmpl-x", object="chat.completion.chunk", created=0, model=MODEL,
        choices=choices, **kw,
    )
    return json.loads(c.model_dump_json(exclude_unset=True, exclude_none=not c.choices))

out["chat_first_chunk"] = chat_chunk(
    [ChatCompletionResponseStreamChoice(
        index=0, delta=DeltaMessage(role="assistant", content=""), logprobs=None,
        finish_reason=None)],
    prompt_token_ids=None, prompt_text=None,
)
out["chat_chunk"] = chat_chunk(
    [ChatCompletionResponseStreamChoice(
        index=0, delta=DeltaMessage(content=" the"), logprobs=None, finish_reason=None,
        token_ids=None)],
    kv_transfer_params=None,
)
out["chat_last_chunk"] = chat_chunk(
    [ChatCompletionResponseStreamChoice(
        index=0, delta=DeltaMessage(content=" the"), logprobs=None,
        finish_reason="length", stop_reason=None, token_ids=None, weight_versions=None)],
    kv_transfer_params=None,
)
out["chat_usage_chunk"] = chat_chunk([], usage=usage, system_fingerprint=None, metrics=None)

# models/serving.py, show_available_models; api_router: JSONResponse(models.model_dump()).
out["models"] = ModelList(
    data=[ModelCard(id=MODEL, created=0, max_model_len=4096, owned_by="vllm", root=MODEL,
                    permission=[])]
).model_dump()

errors = {}
# serve/engine/serving.py, _check_model: an unknown model.
errors["model_not_found"] = create_error_response(
    message=f"The model `nope` does not exist. Valid aliases: {MODEL}.",
    err_type="NotFoundError", status_code=HTTPStatus.NOT_FOUND, param="model",
).model_dump()

# renderers/params.py, TokenizeParams as CompletionRequest.build_tok_params sets it up, then the
# error as serve/engine/serving.py turns a raised VLLMValidationError into an answer.
def tok_error(max_model_len, max_tokens, prompt_len):
    try:
        p = TokenizeParams(
            max_total_tokens=max_model_len, max_output_tokens=max_tokens,
            max_total_tokens_param="max_model_len", max_output_tokens_param="max_tokens",
        )
        p._token_len_check(None, list(range(prompt_len)))
    except Exception as e:
        return create_error_response(e).model_dump()
    return None

errors["prompt_too_long"] = tok_error(100, 10, 101)
# A prompt of exactly max_model_len tokens: get_max_tokens (serve/utils/api_utils.py) leaves
# max_tokens 0, which SamplingParams._verify_args (sampling_params.py) refuses.
try:
    from vllm.sampling_params import SamplingParams
    SamplingParams(max_tokens=0)
except Exception as e:
    errors["prompt_fills_context"] = create_error_response(e).model_dump()
errors["max_tokens_too_large"] = tok_error(100, 200, 5)

# serve/exception_handling/handlers/validation.py: a body that is not JSON, as FastAPI reports it.
def validation(errs):
    req = types.SimpleNamespace(
        app=types.SimpleNamespace(state=types.SimpleNamespace(
            args=types.SimpleNamespace(log_error_stack=False))),
        state=types.SimpleNamespace(),
    )
    resp = asyncio.run(validation_exception_handler(req, RequestValidationError(errs)))
    return {"status": resp.status_code, "body": json.loads(resp.body)}

errors["bad_json"] = validation([{
    "type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error", "input": {},
    "ctx": {"error": "Expecting value"},
}])
try:
    CompletionRequest.model_validate({"model": MODEL})
except ValidationError as e:
    errors["missing_prompt"] = validation(
        [{**err, "loc": ("body", *err["loc"])} for err in e.errors()])
except Exception as e:  # a VLLMValidationError raised by the model validator itself
    errors["missing_prompt"] = {"status": 400, "body": create_error_response(e).model_dump()}
out["errors"] = errors

json.dump(out, sys.stdout, indent=1, sort_keys=True, default=str)
print()
