from servelab.engines.sse import SSEDecoder


def feed_all(parts: list[bytes]) -> list[tuple[int, str, str]]:
    decoder = SSEDecoder()
    out = []
    for i, part in enumerate(parts):
        out += [(e.arrived_ns, e.event, e.data) for e in decoder.feed(part, i)]
    out += [(e.arrived_ns, e.event, e.data) for e in decoder.flush(len(parts))]
    return out


def test_event_split_across_reads_is_stamped_when_complete() -> None:
    assert feed_all([b'data: {"a"', b": 1}", b"\n", b"\n"]) == [(3, "message", '{"a": 1}')]


def test_several_events_in_one_read_share_its_stamp() -> None:
    assert feed_all([b"data: 1\n\ndata: 2\n\n"]) == [(0, "message", "1"), (0, "message", "2")]


def test_crlf_and_cr_line_ends_and_crlf_split_between_reads() -> None:
    assert feed_all([b"data: a\r\n\r\ndata: b\r", b"\n\r\n", b"data: c\r\r"]) == [
        (0, "message", "a"),
        (1, "message", "b"),
        (2, "message", "c"),
    ]


def test_comments_ignored_multiline_data_joined_event_name_kept() -> None:
    events = feed_all([b": ping\n\nevent: error\ndata: x\ndata:y\n\n"])
    assert events == [(0, "error", "x\ny")]


def test_last_event_without_blank_line_dispatched_on_flush() -> None:
    assert feed_all([b"data: [DONE]"]) == [(1, "message", "[DONE]")]


def test_utf8_split_inside_a_character() -> None:
    text = "data: caf\u00e9\n\n".encode()
    cut = text.index(b"\xc3") + 1
    assert feed_all([text[:cut], text[cut:]]) == [(1, "message", "caf\u00e9")]


def test_any_split_of_a_stream_gives_the_same_events() -> None:
    import random

    stream = (
        b'data: {"a": 1}\n\n: ping\n\nevent: error\ndata: x\ndata:y\n\n\n\ndata: caf\xc3\xa9\r\n\r\n'
        b"event: only\n\ndata: z\rdata: w\r\r"
        b"data: [DONE]\n\n"
    )
    want = [(e, d) for _, e, d in feed_all([stream])]
    assert want == [
        ("message", '{"a": 1}'),
        ("error", "x\ny"),
        ("message", "caf\u00e9"),
        ("message", "z\nw"),
        ("message", "[DONE]"),
    ]
    rng = random.Random(7)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 12)))
        parts = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert [(e, d) for _, e, d in feed_all(parts)] == want
