"""A delivery's reason as served: the vocabulary, never what an older record quoted."""

from __future__ import annotations

import pytest
from jetdbt.shared.jobs import hook_reasons as hr

NATS_ANSWER = (
    "ClientResponseError: 400, message='Bad status line \"Expected HTTP/, RTSP/ or ICE/:\\n\\n"
    ' b\\\'INFO {"server_id":"NC3GXYZ","version":"2.15.1","proto":1}\\\'\', url=\'http://h:4222/\''
)


@pytest.mark.parametrize(
    ("recorded", "status", "served"),
    [
        ("", 200, ""),
        ("answered 500", 500, "answered 500"),
        (hr.TIMED_OUT, 0, hr.TIMED_OUT),
        (NATS_ANSWER, 0, hr.NO_HTTP_ANSWER),
        ("ClientConnectorError: Cannot connect to host h:1 ssl:default [Connect call failed]",
         0, hr.NO_HTTP_ANSWER),
        ("ServerDisconnectedError: Server disconnected", 0, hr.NO_HTTP_ANSWER),
        ("TimeoutError: ", 0, hr.TIMED_OUT),
        ("ClientConnectorCertificateError: Cannot connect to host h:443", 0, hr.TLS_FAILED),
        ("ClientConnectorDNSError: Cannot connect to host nowhere.example:80 ssl:default"
         " [host 'nowhere.example' resolves to 127.0.0.1, not a public address: the operator"
         " lists the host in JETDBT_WEBHOOK_HOSTS to allow it]", 0, hr.NOT_ALLOWED),
        ("ClientConnectorDNSError: Cannot connect to host nowhere.example:80 ssl:default"
         " [Name or service not known]", 0, hr.NOT_RESOLVED),
        ("host '10.0.0.7' is not in JETDBT_WEBHOOK_HOSTS", 0, hr.NOT_ALLOWED),
        ("17 deliveries of hook 'x' wait behind one its receiver has not answered yet: this one"
         " is given up", 0, hr.BACKLOG_FULL),
        # A service's bytes that spell a type or a setting choose no other reason.
        ("ClientResponseError: b'TimeoutError: JETDBT_WEBHOOK_HOSTS'", 0, hr.NO_HTTP_ANSWER),
        ("ClientResponseError: b'given up'", 0, hr.NO_HTTP_ANSWER),
        ("b'anything at all'", 0, hr.NO_HTTP_ANSWER),
    ],
)  # fmt: skip
def test_an_older_record_is_served_in_the_vocabulary(recorded, status, served):
    assert hr.served(recorded, status) == served
    assert served in (*hr.REASONS, "", hr.answered(status))
