"""The app's own OpenAI- and Anthropic-compatible endpoints, as plain logic: a request body in, the chat requests it
asks for (pipeline.stages.request) or an ApiError naming the field; the finished runs in, the body each provider's
SDK reads. The HTTP layer (serving/, on Starlette; server.py, beside app.py, routes to it) only moves bytes: it reads
the body, queues the requests on the app's own run queue and sends what these modules shape. docs/api.md lists
every field.

  fields.py              a JSON body's fields read with their types and ranges (the pages' limits)
  call.py                `ApiCall`: the conversation and the chat requests a call runs, one per draw
  openai_chat.py         POST /v1/chat/completions: its body in, chat.completion (and its chunks) out
  anthropic_messages.py  POST /v1/messages: its body in, the message (and its stream's events) out
  logprobs.py            OpenAI's logprobs from a captured run's logits
  replay.py              a finished run sent as a stream: its own text pieces, each with its tokens' logprobs
  errors.py              `ApiError` in each provider's shape, status 400/401/404/413/422/429
  access.py              who may call (loopback, TPE_API_KEY) and each client's places in the queue
  traffic.py             the requests answered, the latest kept in a ring: the Traffic page's rows, the audit's log
  serving/               the HTTP layer: the endpoints' handlers and the streamed answers
"""
