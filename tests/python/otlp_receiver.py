"""A real OTLP/HTTP receiver for the tests: decodes what the gateway exports with the
OpenTelemetry project's own protobuf definitions (the `opentelemetry-proto` package) and
writes each span, metric and log record as one JSON line to the file named by argv[1].

Prints `LISTENING http://127.0.0.1:PORT` once bound. A body that does not decode is
answered 400 and written as `{"signal": "undecodable", ...}`, so a test sees it.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

OUT = open(sys.argv[1], "a", encoding="utf-8")
LOCK = threading.Lock()


def write(record):
    with LOCK:
        OUT.write(json.dumps(record) + "\n")
        OUT.flush()


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    if kind == "kvlist_value":
        return attributes(any_value.kvlist_value.values)
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


def spans(request):
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                write({
                    "signal": "span",
                    "resource": resource,
                    "name": span.name,
                    "kind": Span.SpanKind.Name(span.kind),
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "attributes": attributes(span.attributes),
                    "events": [
                        {"name": event.name, "attributes": attributes(event.attributes)}
                        for event in span.events
                    ],
                    "links": [link.trace_id.hex() for link in span.links],
                    "status": {
                        "code": Status.StatusCode.Name(span.status.code),
                        "message": span.status.message,
                    },
                })


def metrics(request):
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                points = getattr(metric, kind).data_points
                write({
                    "signal": "metric",
                    "name": metric.name,
                    "unit": metric.unit,
                    "kind": kind,
                    "points": [
                        {
                            "attributes": attributes(point.attributes),
                            "count": getattr(point, "count", None),
                            "bounds": list(getattr(point, "explicit_bounds", [])),
                        }
                        for point in points
                    ],
                })


def logs(request):
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                write({
                    "signal": "log",
                    "body": value(record.body),
                    "severity": record.severity_text,
                    "trace_id": record.trace_id.hex(),
                    "span_id": record.span_id.hex(),
                    "attributes": attributes(record.attributes),
                })


ROUTES = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse, spans),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse, metrics),
    "/v1/logs": (ExportLogsServiceRequest, ExportLogsServiceResponse, logs),
}


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        route = ROUTES.get(self.path)
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        if route is None:
            self.send_response(404)
            self.end_headers()
            return
        request_type, response_type, decode = route
        write({
            "signal": "request",
            "path": self.path,
            "content_type": self.headers.get("content-type"),
            "headers": {name.lower(): value for name, value in self.headers.items()},
        })
        try:
            request = request_type()
            request.ParseFromString(body)
            decode(request)
        except Exception as error:  # noqa: BLE001 - any decode failure is the test's news
            write({"signal": "undecodable", "path": self.path, "error": str(error)})
            self.send_response(400)
            self.end_headers()
            return
        answer = response_type().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format, *args):  # quiet: the test's output is the gateway's
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(f"LISTENING http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
