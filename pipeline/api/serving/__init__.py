"""The API's HTTP layer on Starlette (pipeline/api/'s other modules are plain logic): the request handlers and the
streamed answers. server.py routes the paths here; the server's models, queue and stores reach them as a QueueRuns
(views/server/api_runs.py).

  handlers.py  `ApiHandlers`: each endpoint, whole and streamed answers, the traffic log's record
  streams.py   a streamed call's answers as server-sent events, ended and their places given back once
"""
