"""The forms JSON allows for one REST infer request (KServe v2 REST): data flat or nested as
its shape, numbers in plain or scientific notation, keys in any order, whitespace between
every token. Each form of the same rows must give the same answer, the one scikit-learn
computes; what is not JSON (RFC 8259) or breaks the tensor's rules is 400 with {"error": ...},
and the server goes on serving.
"""
import http.client
import json

import numpy as np
import pytest


def post(server, model, body):
    """(status, parsed JSON answer) of POST /v2/models/{model}/infer."""
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def scaler_rows(repo, rows=3):
    case = repo.cases["scaler"]
    return np.asarray(case.inputs["input"][:rows]), np.asarray(case.expected["output"][:rows])


def forms(x):
    """The same [rows, 5] FP64 tensor written five ways."""
    flat = ",".join(repr(float(v)) for v in x.ravel())
    nested = json.dumps(x.tolist())
    sci = ",".join(f"{v:.17e}".replace("e+", "E+") for v in x.ravel())
    shape = json.dumps(list(x.shape))
    ws = " \t\r\n "
    spaced = ws.join(["{", '"inputs"', ":", "[", "{", '"name"', ":", '"input"', ",", '"shape"', ":", shape, ",",
                      '"datatype"', ":", '"FP64"', ",", '"data"', ":", "[", flat.replace(",", ws + "," + ws), "]", "}", "]", "}"])
    return {
        "flat": f'{{"inputs":[{{"name":"input","shape":{shape},"datatype":"FP64","data":[{flat}]}}]}}',
        "nested": f'{{"inputs":[{{"name":"input","shape":{shape},"datatype":"FP64","data":{nested}}}]}}',
        "scientific": f'{{"inputs":[{{"name":"input","shape":{shape},"datatype":"FP64","data":[{sci}]}}]}}',
        "data-first": f'{{"outputs":[{{"name":"output"}}],"inputs":[{{"data":{nested},"datatype":"FP64","shape":{shape},"name":"input"}}],"id":"x"}}',
        "whitespace": ws + spaced + ws,
    }


def test_every_form_gives_the_same_answer(server, repo):
    x, want = scaler_rows(repo)
    answers = {}
    for name, body in forms(x).items():
        status, answer = post(server, "scaler", body.encode())
        assert status == 200, (name, answer)
        [out] = answer["outputs"]
        assert out["shape"] == list(want.shape), name
        answers[name] = out["data"]
        np.testing.assert_allclose(np.asarray(out["data"]).reshape(want.shape), want, rtol=1e-12, atol=1e-12, err_msg=name)
    first = answers["flat"]
    assert all(a == first for a in answers.values()), answers


def test_escaped_keys_and_names(server, repo):
    x, want = scaler_rows(repo, 1)
    body = '{"\\u0069nputs":[{"n\\u0061me":"\\u0069nput","shape":[1,5],"datatype":"FP\\u0036\\u0034","data":%s}]}' % json.dumps(x.tolist())
    status, answer = post(server, "scaler", body.encode())
    assert status == 200, answer
    np.testing.assert_allclose(answer["outputs"][0]["data"], want.ravel(), rtol=1e-12, atol=1e-12)


def _infer(shape, data, datatype="FP64"):
    return f'{{"inputs":[{{"name":"input","shape":{shape},"datatype":"{datatype}","data":{data}}}]}}'


BAD = {
    # Not JSON.
    "nan-token": (_infer("[1,5]", "[NaN,1,2,3,4]"), "not valid JSON"),
    "infinity-token": (_infer("[1,5]", "[Infinity,1,2,3,4]"), "not valid JSON"),
    "minus-infinity": (_infer("[1,5]", "[-Infinity,1,2,3,4]"), "not valid JSON"),
    "leading-zero": (_infer("[1,5]", "[01,1,2,3,4]"), "not valid JSON"),
    "bare-fraction": (_infer("[1,5]", "[.5,1,2,3,4]"), "not valid JSON"),
    "overflowing-number": (_infer("[1,5]", "[1e400,1,2,3,4]"), "not valid JSON"),
    "truncated": (_infer("[1,5]", "[1,2,3,4,5]")[:-7], "not valid JSON"),
    "trailing-text": (_infer("[1,5]", "[1,2,3,4,5]") + "]", "not valid JSON"),
    "depth-bomb": ('{"inputs":[{"name":"input","shape":[1,5],"datatype":"FP64","data":' + "[" * 100_000, "nesting is too deep"),
    "lone-surrogate": ('{"id":"\\ud800","inputs":[]}', "not valid JSON"),
    # JSON, but not a tensor the shape describes.
    "too-few": (_infer("[1,5]", "[1,2,3,4]"), "needs 5 values"),
    "too-many": (_infer("[1,5]", "[[1,2,3,4,5],[6,7,8,9,10]]"), "needs 5 values"),
    "strings-for-fp64": (_infer("[1,5]", '["1",2,3,4,5]'), "must be numbers"),
    "out-of-range": (_infer("[1,5]", "[1,2,3,4,300]", "UINT8"), "out of range"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_requests_are_400(server, name):
    body, words = BAD[name]
    status, answer = post(server, "scaler", body.encode())
    assert status == 400, answer
    assert words in answer["error"], answer
    # The server goes on serving.
    status, _ = post(server, "scaler", _infer("[1,5]", "[1,2,3,4,5]").encode())
    assert status == 200
