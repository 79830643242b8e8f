"""A local LLM endpoint for the provider tests: an http.server thread on 127.0.0.1 (random port)
speaking the Anthropic Messages API (POST /v1/messages) and the OpenAI Chat Completions API
(POST /v1/chat/completions) wire formats, so the real SDKs can be pointed at it with base_url.
It keeps every request (path, headers, JSON body) for the tests to inspect."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERRORS = {  # the bodies each API sends with an error status
    401: ("authentication_error", "invalid x-api-key", "invalid_api_key"),
    500: ("api_error", "Internal server error", "server_error"),
}


class LLMServer:
    def __init__(self, replies=(), status: int = 200, block_at: int | None = None):
        self.replies = list(replies)  # answered in order; the last one repeats
        self.status = status  # != 200: every request gets that error, in the API's own error format
        self.block_at = block_at  # this request (0-based) hangs, unanswered, until `release` is set
        self.requests: list[dict] = []
        self.answered = 0
        self.reached = threading.Event()  # set when the blocking request arrives
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> LLMServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    index = len(server.requests)
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    server.requests.append({"path": self.path, "headers": headers, "body": body})
                if index == server.block_at:
                    server.reached.set()
                    server.release.wait(600)
                    return  # never answered: the client was killed meanwhile
                status, payload = server.answer(self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True, name="llm-server").start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        anthropic = path.endswith("/v1/messages")
        if self.status != 200:
            kind, message, code = ERRORS[self.status]
            if anthropic:
                return self.status, {"type": "error", "error": {"type": kind, "message": message}}
            return self.status, {"error": {"message": message, "type": kind, "code": code, "param": None}}
        with self._lock:
            text = self.replies[min(self.answered, len(self.replies) - 1)]
            self.answered += 1
        if anthropic:
            return 200, {
                "id": f"msg_{self.answered}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 20},
            }
        return 200, {
            "id": f"chatcmpl-{self.answered}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "logprobs": None,
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }

    def prompts(self) -> list[str]:
        """The user message of every request, in order."""
        return [r["body"]["messages"][-1]["content"] for r in self.requests]
