/* Envelope ops end to end: YAML op list + input body -> exact output bytes and status. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rewrite.h"
#include "jvalid.h"

#define FAIL NULL                       /* expected: rewrite_apply fails (on_error applies) */
#define E VALIDATE_ENVELOPE
#define F VALIDATE_FULL

struct rw_case {
	const char *ops;
	const char *in;
	const char *out;
	int status;
	enum validate_mode mode;
};

static const struct rw_case cases[] = {
	/* unwrap */
	{ "[unwrap: data]", "{\"code\":0,\"data\":{\"id\":1,\"name\":\"x\"}}", "{\"id\":1,\"name\":\"x\"}", 0, E },
	{ "[unwrap: data]", "{\"data\":[1,2,3]}", "[1,2,3]", 0, E },
	{ "[unwrap: data]", "{\"data\":\"hi\"}", "\"hi\"", 0, E },
	{ "[unwrap: data]", "{\"data\":12.5e3}", "12.5e3", 0, E },
	{ "[unwrap: data]", "{\"data\":null}", "null", 0, E },
	{ "[unwrap: data]", "{\"data\":false,\"x\":1}", "false", 0, E },
	{ "[unwrap: data]", "{\"code\":0}", FAIL, 0, E },
	{ "[unwrap: data]", "[{\"data\":1}]", FAIL, 0, E },
	{ "[unwrap: data]", "42", FAIL, 0, E },
	{ "[unwrap: data]", "\"data\"", FAIL, 0, E },
	{ "[unwrap: data.result]", "{\"data\":{\"result\":{\"a\":[1]}}}", "{\"a\":[1]}", 0, E },
	{ "[unwrap: data.result]", "{\"data\":{\"other\":1}}", FAIL, 0, E },
	{ "[unwrap: data.result]", "{\"data\":[1]}", FAIL, 0, E },
	{ "[unwrap: data.result]", "{\"data\":{\"result\":{\"a\":1]}}}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":1,\"data\":2}", "2", 0, E },
	{ "[unwrap: data]", "{\"d\\u0061ta\":{\"x\":1}}", "{\"x\":1}", 0, E },
	{ "[unwrap: data]", "{ \"data\" : { \"a\" : 1 } }", "{ \"a\" : 1 }", 0, E },
	{ "[unwrap: data, unwrap: data]", "{\"data\":{\"data\":[]}}", "[]", 0, E },
	{ "[unwrap: data]", "{\"data\":{}}", "{}", 0, E },
	{ "[unwrap: data]", "{\"data\":[]}", "[]", 0, E },
	{ "[unwrap: data]", "{\"data\":[[[[[]]]]]}", "[[[[[]]]]]", 0, E },
	{ "[unwrap: dätä]", "{\"dätä\":1}", "1", 0, E },
	{ "[unwrap: dätä]", "{\"d\\u00e4t\\u00E4\":1}", "1", 0, E },
	{ "[unwrap: \"\\U0001F600\"]", "{\"\\ud83d\\ude00\":5}", "5", 0, E },
	{ "[unwrap: \"a/b\"]", "{\"a\\/b\":5}", "5", 0, E },
	{ "[unwrap: \"a\\tb\"]", "{\"a\\tb\":5}", "5", 0, E },
	{ "[unwrap: data]", "{\"data\":1,}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":1", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":{\"a\":1}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":{\"a\":1]}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":[1,2}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":\"abc}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":1} x", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":1}{}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":1}  \n", "1", 0, E },
	{ "[unwrap: data]", " \n\t\r{\"data\":true}", "true", 0, E },
	{ "[unwrap: data]", "{\"data\" 1}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"a\":1 \"data\":2}", FAIL, 0, E },
	{ "[unwrap: data]", "{'data':1}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":tru}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":01}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":-}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":1.}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":+1}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":\"a\\\"b\"}", "\"a\\\"b\"", 0, E },
	{ "[unwrap: data]", "{\"data\":\"}{][\"}", "\"}{][\"", 0, E },
	{ "[unwrap: data]", "{\"data\":\"a\\\\\"}", "\"a\\\\\"", 0, E },
	{ "[unwrap: data]", "{\"data\":{\"s\":\"]}\\\"\"}}", "{\"s\":\"]}\\\"\"}", 0, E },
	{ "[unwrap: data]", "{1:2}", FAIL, 0, E },
	{ "[unwrap: data]", "", FAIL, 0, E },
	{ "[unwrap: data]", "   ", FAIL, 0, E },
	{ "[unwrap: data]", "{\"a\\\"b\":1,\"data\":2}", "2", 0, E },
	{ "[unwrap: data]", "{\"data\":{\"a\":1},\"data\":[2]}", "[2]", 0, E },
	{ "[unwrap: data]", "{\"x\":[\"\\\\\",\"]\"],\"data\":3}", "3", 0, E },
	{ "[unwrap: data]", "{\"data\":1,\"x\":}", FAIL, 0, E },
	{ "[unwrap: data]", "{,\"data\":1}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\"::1}", FAIL, 0, E },
	{ "[unwrap: data]", "{\"data\":[1,]}", "[1,]", 0, E },   /* balanced: passes envelope mode */
	{ "[unwrap: data]", "{\"data\":[1,]}", FAIL, 0, F },
	{ "[unwrap: data]", "{\"data\":\"\xff\"}", "\"\xff\"", 0, E },
	{ "[unwrap: data]", "{\"data\":\"\xff\"}", FAIL, 0, F },
	{ "[unwrap: data]", "{\"data\":\"a\x01\"}", FAIL, 0, F },
	{ "[unwrap: data]", "{\"data\":\"\\ud800\"}", "\"\\ud800\"", 0, F },
	{ "[unwrap: data]", "{\"data\":{\"k\":[1,{\"z\":null}]}} \n", "{\"k\":[1,{\"z\":null}]}", 0, F },

	/* wrap */
	{ "[wrap: result]", "{\"a\":1}", "{\"result\":{\"a\":1}}", 0, E },
	{ "[wrap: result]", "[1,2]", "{\"result\":[1,2]}", 0, E },
	{ "[wrap: result]", "42", "{\"result\":42}", 0, E },
	{ "[wrap: result]", "\"x\"", "{\"result\":\"x\"}", 0, E },
	{ "[wrap: result]", "null", "{\"result\":null}", 0, E },
	{ "[wrap: result]", "-0.5E-3", "{\"result\":-0.5E-3}", 0, E },
	{ "[wrap: result]", " { \"a\" : 1 } \n", "{\"result\":{ \"a\" : 1 }}", 0, E },
	{ "[wrap: result]", "{}", "{\"result\":{}}", 0, E },
	{ "[wrap: result]", "[]", "{\"result\":[]}", 0, E },
	{ "[wrap: a.b]", "1", "{\"a\":{\"b\":1}}", 0, E },
	{ "[wrap: result, unwrap: result]", " [1, 2] \n", " [1, 2] \n", 0, E },
	{ "[wrap: result]", "[1,2", FAIL, 0, E },
	{ "[wrap: result]", "tru", FAIL, 0, E },
	{ "[wrap: result]", "{\"a\":1]", FAIL, 0, E },
	{ "[wrap: result]", "1 2", FAIL, 0, E },
	{ "[wrap: result]", "[1] [2]", FAIL, 0, E },
	{ "[wrap: \"a\\\"b\"]", "1", "{\"a\\\"b\":1}", 0, E },
	{ "[wrap: x, wrap: y]", "1", "{\"y\":{\"x\":1}}", 0, E },
	{ "[wrap: ключ]", "1", "{\"ключ\":1}", 0, E },
	{ "[wrap: result]", "{\"a\":[1,]}", "{\"result\":{\"a\":[1,]}}", 0, E },
	{ "[wrap: result]", "{\"a\":[1,]}", FAIL, 0, F },
	{ "[wrap: result]", "{\"a\":[1,}", FAIL, 0, E },
	{ "[wrap: result]", "\"a\\\"}\"", "{\"result\":\"a\\\"}\"}", 0, E },

	/* rename */
	{ "[rename: {msg: message}]", "{\"msg\":\"ok\",\"code\":0}", "{\"message\":\"ok\",\"code\":0}", 0, E },
	{ "[rename: {msg: message}]", "{\"a\":1,\"msg\":2,\"b\":3}", "{\"a\":1,\"message\":2,\"b\":3}", 0, E },
	{ "[rename: {msg: message}]", "{\"msg\":1,\"msg\":2}", "{\"message\":1,\"message\":2}", 0, E },
	{ "[rename: {msg: message}]", "{ \"a\" : 1 }\n", "{ \"a\" : 1 }\n", 0, E },
	{ "[rename: {msg: message}]", "{ \"msg\" : 1 }", "{\"message\":1}", 0, E },
	{ "[rename: {msg: message}]", "{\"m\\u0073g\":1}", "{\"message\":1}", 0, E },
	{ "[rename: {data.msg: message}]", "{\"data\":{\"msg\":1},\"msg\":2}", "{\"data\":{\"message\":1},\"msg\":2}", 0, E },
	{ "[rename: {a: b, b: a}]", "{\"a\":1,\"b\":2}", "{\"b\":1,\"a\":2}", 0, E },
	{ "[rename: {x: \"a\\\"b\"}]", "{\"x\":1}", "{\"a\\\"b\":1}", 0, E },
	{ "[rename: {msg: message}]", "[1]", FAIL, 0, E },
	{ "[rename: {msg: message}]", "{\"msg\":{\"x\":[1]}}", "{\"message\":{\"x\":[1]}}", 0, E },
	{ "[rename: {data.msg: m}]", "{\"data\":[{\"msg\":1}]}", "{\"data\":[{\"msg\":1}]}", 0, E },
	{ "[rename: {a: x, b: y}]", "{\"a\":1,\"b\":2,\"c\":3}", "{\"x\":1,\"y\":2,\"c\":3}", 0, E },
	{ "[rename: {d.m: n}]", "{\"d\":{\"m\":1},\"d\":{\"m\":2}}", "{\"d\":{\"n\":1},\"d\":{\"n\":2}}", 0, E },
	{ "[rename: {msg: message}]", "{}", "{}", 0, E },
	{ "[rename: {msg: message}]", "{\"msg\":1,}", FAIL, 0, E },

	/* drop */
	{ "[drop: [debug]]", "{\"code\":0,\"debug\":{\"trace\":[1]},\"data\":1}", "{\"code\":0,\"data\":1}", 0, E },
	{ "[drop: [debug]]", "{\"debug\":1,\"a\":2}", "{\"a\":2}", 0, E },
	{ "[drop: [debug]]", "{\"a\":2,\"debug\":1}", "{\"a\":2}", 0, E },
	{ "[drop: [debug]]", "{\"debug\":1}", "{}", 0, E },
	{ "[drop: [debug]]", "{\"debug\":1,\"a\":2,\"debug\":3}", "{\"a\":2}", 0, E },
	{ "[drop: [debug]]", "{ \"a\" : 1 }\n", "{ \"a\" : 1 }\n", 0, E },
	{ "[drop: [a, b]]", "{\"a\":1,\"b\":2,\"c\":3}", "{\"c\":3}", 0, E },
	{ "[drop: debug]", "{\"a\":1,\"debug\":2}", "{\"a\":1}", 0, E },
	{ "[drop: [data.secret]]", "{\"data\":{\"x\":1,\"secret\":2}}", "{\"data\":{\"x\":1}}", 0, E },
	{ "[drop: [data.secret]]", "{\"a\":1}", "{\"a\":1}", 0, E },
	{ "[drop: [data.secret]]", "{\"data\":5}", "{\"data\":5}", 0, E },
	{ "[drop: [debug]]", "{}", "{}", 0, E },
	{ "[drop: [debug]]", " {  } ", " {  } ", 0, E },
	{ "[drop: [debug]]", "[1]", FAIL, 0, E },
	{ "[drop: [debug]]", "null", FAIL, 0, E },
	{ "[drop: [b]]", "{\"a\" : 1 ,  \"b\":2, \"c\" :3}", "{\"a\" : 1,\"c\" :3}", 0, E },
	{ "[drop: [c]]", "{\"a\":1,\"b\":2,\"c\":3,\"d\":4}", "{\"a\":1,\"b\":2,\"d\":4}", 0, E },
	{ "[drop: [debug]]", "{\"d\\u0065bug\":1,\"a\":2}", "{\"a\":2}", 0, E },
	{ "[drop: [é]]", "{\"\\u00e9\":1,\"e\":2}", "{\"e\":2}", 0, E },
	{ "[drop: [debug]]", "{\"debugger\":1}", "{\"debugger\":1}", 0, E },
	{ "[drop: [debug]]", "{\"Debug\":1}", "{\"Debug\":1}", 0, E },
	{ "[drop: [data.a.b]]", "{\"data\":{\"a\":{\"b\":1,\"c\":2}}}", "{\"data\":{\"a\":{\"c\":2}}}", 0, E },
	{ "[drop: [data.x]]", "{\"data\":{\"x\":1},\"data\":{\"x\":2,\"y\":3}}", "{\"data\":{},\"data\":{\"y\":3}}", 0, E },
	{ "[drop: [data.x]]", "{\"data\":{\"x\":1,\"y\":[1,}}", FAIL, 0, E },
	{ "[drop: [debug]]", "{\"a\":\"\\u0000\",\"debug\":{}}", "{\"a\":\"\\u0000\"}", 0, E },

	/* keep */
	{ "[keep: [code, data]]", "{\"code\":0,\"msg\":\"x\",\"data\":1,\"debug\":2}", "{\"code\":0,\"data\":1}", 0, E },
	{ "[keep: [code]]", "{\"a\":1,\"b\":2}", "{}", 0, E },
	{ "[keep: [a]]", "{\"a\":1,\"b\":2,\"a\":3}", "{\"a\":1,\"a\":3}", 0, E },
	{ "[keep: [data.id]]", "{\"data\":{\"id\":1,\"secret\":2},\"x\":3}", "{\"data\":{\"id\":1}}", 0, E },
	{ "[keep: [data, data.id]]", "{\"data\":{\"id\":1,\"secret\":2},\"x\":3}", "{\"data\":{\"id\":1,\"secret\":2}}", 0, E },
	{ "[keep: [data.id]]", "{\"data\":[1],\"x\":1}", "{\"data\":[1]}", 0, E },
	{ "[keep: [data.b, data.a]]", "{\"data\":{\"a\":1,\"b\":2,\"c\":3}}", "{\"data\":{\"a\":1,\"b\":2}}", 0, E },
	{ "[keep: [a]]", "[1]", FAIL, 0, E },
	{ "[keep: [a]]", "{ \"a\": 1 }", "{ \"a\": 1 }", 0, E },
	{ "[keep: [a, b]]", "{\"b\":1,\"a\":2}", "{\"b\":1,\"a\":2}", 0, E },
	{ "[keep: [data.x.y, z]]", "{\"data\":{\"x\":{\"y\":1,\"w\":2},\"q\":3},\"z\":4,\"r\":5}", "{\"data\":{\"x\":{\"y\":1}},\"z\":4}", 0, E },
	{ "[keep: [a]]", "{}", "{}", 0, E },

	/* set */
	{ "[set: {gateway: jsongate}]", "{\"a\":1}", "{\"a\":1,\"gateway\":\"jsongate\"}", 0, E },
	{ "[set: {gateway: jsongate}]", "{\"gateway\":1,\"a\":2}", "{\"gateway\":\"jsongate\",\"a\":2}", 0, E },
	{ "[set: {g: x}]", "{\"g\":1,\"a\":2,\"g\":3}", "{\"g\":\"x\",\"a\":2,\"g\":\"x\"}", 0, E },
	{ "[set: {a: 1}]", "{}", "{\"a\":1}", 0, E },
	{ "[set: {n: 2, s: \"2\", t: true, f: false, z: null, fl: 1.5, e: -1e3}]", "{}",
	  "{\"n\":2,\"s\":\"2\",\"t\":true,\"f\":false,\"z\":null,\"fl\":1.5,\"e\":-1e3}", 0, E },
	{ "[set: {m: {a: [1, x]}, l: [], o: {}}]", "{}", "{\"m\":{\"a\":[1,\"x\"]},\"l\":[],\"o\":{}}", 0, E },
	{ "[set: {v: 0x1F, w: yes, u: 1_000, d: 1.}]", "{}", "{\"v\":\"0x1F\",\"w\":\"yes\",\"u\":\"1_000\",\"d\":\"1.\"}", 0, E },
	{ "[set: {rid: $request_id}]", "{}", "{\"rid\":\"abc-123\"}", 0, E },
	{ "[set: {v: $route}]", "{}", "{\"v\":\"r\\\"o\\\\u\\u0001te\"}", 0, E },
	{ "[set: {v: $upstream}]", "{}", "{\"v\":\"up\xef\xbf\xbd\xef\xbf\xbdx\"}", 0, E },
	{ "[set: {v: $remote_addr}]", "{}", "{\"v\":\"127.0.0.1\"}", 0, E },
	{ "[set: {p: $$route}]", "{}", "{\"p\":\"$route\"}", 0, E },
	{ "[set: {p: \"$$\"}]", "{}", "{\"p\":\"$\"}", 0, E },
	{ "[set: {h: $header.x-foo}]", "{}", "{\"h\":\"b\\\"ar\\n\"}", 0, E },
	{ "[set: {h: $header.X-Missing}]", "{}", "{\"h\":null}", 0, E },
	{ "[set: {t: $time_iso8601}]", "{}", "{\"t\":\"2001-09-09T01:46:40+00:00\"}", 0, E },
	{ "[set: {dn: $ssl_client_s_dn, v: $ssl_client_verify}]", "{}",
	  "{\"dn\":\"CN=client \\\"one\\\",O=Acme\\\\, Inc.\",\"v\":\"SUCCESS\"}", 0, E },
	{ "[set: {c: {dn: $ssl_client_s_dn}}]", "{\"a\":1}",
	  "{\"a\":1,\"c\":{\"dn\":\"CN=client \\\"one\\\",O=Acme\\\\, Inc.\"}}", 0, E },
	{ "[set: {meta.gw: x}]", "{}", "{\"meta\":{\"gw\":\"x\"}}", 0, E },
	{ "[set: {meta.gw: x}]", "{\"meta\":{\"a\":1}}", "{\"meta\":{\"a\":1,\"gw\":\"x\"}}", 0, E },
	{ "[set: {meta.gw: x}]", "{\"meta\":1}", FAIL, 0, E },
	{ "[set: {a: 1}]", "[1]", FAIL, 0, E },
	{ "[set: {a: 1}]", "\"s\"", FAIL, 0, E },
	{ "[set: {\"a\\\"b\": 1}]", "{}", "{\"a\\\"b\":1}", 0, E },
	{ "[set: {a: 1}, drop: [a]]", "{\"a\":0,\"b\":1}", "{\"b\":1}", 0, E },
	{ "[set: {m: {id: $request_id}}]", "{}", "{\"m\":{\"id\":\"abc-123\"}}", 0, E },
	{ "[set: {g: v}]", "{\"g\":{\"x\":[1,2]},\"a\":1}", "{\"g\":\"v\",\"a\":1}", 0, E },
	{ "[set: {b: 2}]", "{ \"a\" : 1 }", "{\"a\" : 1,\"b\":2}", 0, E },
	{ "[set: {s: \"true\", e: \"\"}]", "{}", "{\"s\":\"true\",\"e\":\"\"}", 0, E },
	{ "[set: {l: [$route, $$x, \"$$\"]}]", "{}", "{\"l\":[\"r\\\"o\\\\u\\u0001te\",\"$x\",\"$\"]}", 0, E },
	{ "[set: {d\\u0061ta: 1}]", "{\"data\":0}", "{\"data\":0,\"d\\\\u0061ta\":1}", 0, E },
	{ "[set: {data: 1}]", "{\"d\\u0061ta\":0}", "{\"d\\u0061ta\":1}", 0, E },
	{ "[set: {a.b.c: 1}]", "{\"a\":{}}", "{\"a\":{\"b\":{\"c\":1}}}", 0, E },
	{ "[set: {a: ~, b: Null, c: TRUE}]", "{}", "{\"a\":null,\"b\":null,\"c\":true}", 0, E },

	/* status_from */
	{ "[status_from: {field: code, map: {0: 200, 404: 404}, default: 502}]", "{\"code\":0}", "{\"code\":0}", 200, E },
	{ "[status_from: {field: code, map: {0: 200, 404: 404}, default: 502}]", "{\"code\":404,\"x\":1}", "{\"code\":404,\"x\":1}", 404, E },
	{ "[status_from: {field: code, map: {0: 200, 404: 404}, default: 502}]", "{\"code\":7}", "{\"code\":7}", 502, E },
	{ "[status_from: {field: code, map: {0: 200, 404: 404}, default: 502}]", "{}", "{}", 502, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":\"0\"}", "{\"code\":\"0\"}", 502, E },
	{ "[status_from: {field: code, map: {\"0\": 200}, default: 502}]", "{\"code\":\"0\"}", "{\"code\":\"0\"}", 200, E },
	{ "[status_from: {field: code, map: {\"0\": 200}, default: 502}]", "{\"code\":0}", "{\"code\":0}", 502, E },
	{ "[status_from: {field: code, map: {\"0\": 200}, default: 502}]", "{\"code\":\"\\u0030\"}", "{\"code\":\"\\u0030\"}", 200, E },
	{ "[status_from: {field: code, map: {ok: 201}}]", "{\"code\":\"ok\"}", "{\"code\":\"ok\"}", 201, E },
	{ "[status_from: {field: code, map: {0: 200}}]", "{\"code\":1}", "{\"code\":1}", 0, E },
	{ "[status_from: {field: status}]", "{\"status\":201}", "{\"status\":201}", 201, E },
	{ "[status_from: {field: status}]", "{\"status\":2010}", "{\"status\":2010}", 0, E },
	{ "[status_from: {field: meta.code, map: {0: 200}}]", "{\"meta\":{\"code\":0}}", "{\"meta\":{\"code\":0}}", 200, E },
	{ "[status_from: {field: code, map: {0: 200}}]", "[0]", FAIL, 0, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}, unwrap: data]", "{\"code\":0,\"data\":[1]}", "[1]", 200, E },
	{ "[status_from: {field: ok, map: {true: 200, false: 500}}]", "{\"ok\":false}", "{\"ok\":false}", 500, E },
	{ "[status_from: {field: ok, map: {null: 204}}]", "{\"ok\":null}", "{\"ok\":null}", 204, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":0.0}", "{\"code\":0.0}", 502, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":1,\"code\":0}", "{\"code\":1,\"code\":0}", 200, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":{\"a\":0}}", "{\"code\":{\"a\":0}}", 502, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":0,}", FAIL, 0, E },
	{ "[status_from: {field: code, map: {0: 200}}, status_from: {field: c2, map: {1: 404}}]", "{\"code\":0,\"c2\":1}", "{\"code\":0,\"c2\":1}", 404, E },

	/* several ops in order */
	{ "[drop: [debug], rename: {msg: message}, set: {gateway: bench}]",
	  "{\"code\":0,\"msg\":\"ok\",\"data\":{\"a\":[1,2]},\"debug\":{\"t\":1}}",
	  "{\"code\":0,\"message\":\"ok\",\"data\":{\"a\":[1,2]},\"gateway\":\"bench\"}", 0, E },
	{ "[unwrap: data, set: {x: 1}]", "{\"data\":{\"a\":1}}", "{\"a\":1,\"x\":1}", 0, E },
	{ "[unwrap: data, set: {x: 1}]", "{\"data\":[1]}", FAIL, 0, E },
	{ "[wrap: r, set: {x: 2}]", "[1]", "{\"r\":[1],\"x\":2}", 0, E },
	{ "[unwrap: data, wrap: result]", "{\"data\":{\"a\":1}}", "{\"result\":{\"a\":1}}", 0, E },
	{ "[keep: [a, b], rename: {a: z}]", "{\"a\":1,\"b\":2,\"c\":3}", "{\"z\":1,\"b\":2}", 0, E },
	{ "[drop: [a], set: {a: 9}]", "{\"a\":1,\"b\":2}", "{\"b\":2,\"a\":9}", 0, E },
	{ "[rename: {a: b}, drop: [b]]", "{\"a\":1,\"c\":2}", "{\"c\":2}", 0, E },
	{ "[]", " {\"a\" :1} ", " {\"a\" :1} ", 0, E },
	{ "[]", "{\"a\" :1", FAIL, 0, E },
	{ "[wrap: w, unwrap: w.data]", "{\"data\":1}", "1", 0, E },
	{ "[wrap: w, unwrap: w.data]", "{\"data\":1", FAIL, 0, E },
	{ "[wrap: w, drop: [w.x]]", "{\"x\":1,\"y\":2}", "{\"w\":{\"y\":2}}", 0, E },
	{ "[wrap: w, rename: {w.x: z}]", "{\"x\":1}", "{\"w\":{\"z\":1}}", 0, E },
	{ "[set: {a: 1}, wrap: w, unwrap: w]", "{}", "{\"a\":1}", 0, E },
	{ "[unwrap: data, drop: [x]]", "{\"data\":{\"x\":1, \"y\" : 2}}", "{\"y\" : 2}", 0, E },
	{ "[unwrap: data, keep: [y]]", "{\"data\":{\"x\":1,\"y\":2}} ", "{\"y\":2}", 0, F },
	{ "[drop: [data.y], unwrap: data]", "{\"data\":{\"x\":1,\"y\":2}}", "{\"x\":1}", 0, E },
};

static void
vars_init(struct rewrite_vars *v, struct http_header *h)
{
	memset(v, 0, sizeof(*v));
	v->request_id = (struct http_str){ "abc-123", 7 };
	v->route = (struct http_str){ "r\"o\\u\x01te", 8 };
	v->upstream = (struct http_str){ "up\xff\xc3x", 5 };
	v->remote_addr = (struct http_str){ "127.0.0.1", 9 };
	v->ssl_client_s_dn = (struct http_str){ "CN=client \"one\",O=Acme\\, Inc.", 29 };
	v->ssl_client_verify = (struct http_str){ "SUCCESS", 7 };
	v->now = 1000000000;
	h[0].name = (struct http_str){ "Accept", 6 };
	h[0].value = (struct http_str){ "*/*", 3 };
	h[1].name = (struct http_str){ "X-Foo", 5 };
	h[1].value = (struct http_str){ "b\"ar\n", 5 };
	v->headers = h;
	v->nheaders = 2;
}

/* Output bytes of a result, into a malloc'd buffer. */
static char *
join(const struct rewrite_result *r)
{
	char *out = malloc(r->total_len + 1), *p = out;
	size_t i;

	for (i = 0; i < r->nspans; i++) {
		memcpy(p, r->spans[i].p, r->spans[i].len);
		p += r->spans[i].len;
	}
	*p = '\0';
	ck_assert_uint_eq((size_t)(p - out), r->total_len);
	return out;
}

START_TEST(test_table)
{
	const struct rw_case *c = &cases[_i];
	struct rewrite_program *prog;
	struct rewrite_ctx *ctx;
	struct rewrite_result res;
	struct rewrite_vars vars;
	struct http_header hdrs[2];
	char err[256], *out;
	int r;

	prog = rewrite_program_from_yaml(c->ops, strlen(c->ops), err, sizeof(err));
	ck_assert_msg(prog != NULL, "case %d: ops %s: %s", _i, c->ops, err);
	vars_init(&vars, hdrs);
	ctx = rewrite_ctx_new(1000);
	/* Twice on one ctx: reused arrays must give the same answer. */
	for (int round = 0; round < 2; round++) {
		r = rewrite_apply(ctx, prog, c->mode, c->in, strlen(c->in), &vars, &res);
		if (c->out == FAIL) {
			ck_assert_msg(r == -1, "case %d: %s on %s: expected failure", _i, c->ops, c->in);
			ck_assert_ptr_nonnull(res.error);
			continue;
		}
		ck_assert_msg(r == 0, "case %d: %s on %s: failed: %s", _i, c->ops, c->in,
		    res.error);
		out = join(&res);
		ck_assert_msg(strcmp(out, c->out) == 0, "case %d: %s on %s:\n got %s\nwant %s", _i,
		    c->ops, c->in, out, c->out);
		ck_assert_int_eq(res.status, c->status);
		/* Never less valid than the input. */
		if (jvalid_check(c->in, strlen(c->in), 1000, NULL) == 0)
			ck_assert_msg(jvalid_check(out, strlen(out), 1000, NULL) == 0,
			    "case %d: valid input, invalid output %s", _i, out);
		free(out);
	}
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

/* Op lists that must be rejected at load time, with the exact message. */
static const struct {
	const char *ops;
	const char *error;
} bad_ops[] = {
	{ "[unwarp: data]", "1:2: unknown op 'unwarp' (expected unwrap, wrap, rename, drop, keep, set, status_from)" },
	{ "[unwrap: [a]]", "1:10: unwrap must be a key or a dotted path such as data.result" },
	{ "[unwrap: a..b]", "1:10: unwrap: empty key in path 'a..b'" },
	{ "[wrap: .a]", "1:8: wrap: empty key in path '.a'" },
	{ "[unwrap: \"\"]", "1:10: unwrap: empty key in path ''" },
	{ "[drop: []]", "1:8: drop expects a non-empty list of keys, e.g. [ debug, data.trace ]" },
	{ "[keep: {a: 1}]", "1:8: keep expects a non-empty list of keys, e.g. [ debug, data.trace ]" },
	{ "[rename: [a]]", "1:10: rename expects a non-empty mapping, e.g. { msg: message }" },
	{ "[rename: {a: [b]}]", "1:14: rename: the new name of 'a' must be a non-empty string" },
	{ "[set: []]", "1:7: set expects a non-empty mapping, e.g. { gateway: jsongate }" },
	{ "[set: {a: $nope}]", "1:11: unknown variable '$nope' (expected $request_id, $route, $upstream, $remote_addr, $time_iso8601, $header.NAME, $ssl_client_s_dn, $ssl_client_verify; $$ for a literal $)" },
	{ "[set: {a: \"$header.\"}]", "1:11: unknown variable '$header.' (expected $request_id, $route, $upstream, $remote_addr, $time_iso8601, $header.NAME, $ssl_client_s_dn, $ssl_client_verify; $$ for a literal $)" },
	{ "[set: {a: $header.a:b}]", "1:11: bad header name in variable '$header.a:b'" },
	{ "[set: {a: {[1]: 2}}]", "1:12: object keys in a set value must be scalars" },
	{ "[status_from: {map: {0: 200}}]", "1:15: status_from needs a field, e.g. { field: code }" },
	{ "[status_from: {field: c, default: 99}]", "1:35: status must be an HTTP status code between 100 and 599" },
	{ "[status_from: {field: c, map: {0: abc}}]", "1:35: status must be an HTTP status code between 100 and 599" },
	{ "[status_from: {field: c, map: [1]}]", "1:31: status_from map must be a mapping of field values to status codes, e.g. { 0: 200, 404: 404 }" },
	{ "[status_from: {field: c, map: {0: 200, 0: 201}}]", "1:40: duplicate key '0' in status_from map" },
	{ "[status_from: {field: c, mapp: {}}]", "1:26: unknown key 'mapp' in status_from (expected field, map, default)" },
	{ "[status_from: 1]", "1:15: status_from expects a non-empty mapping, e.g. { field: code, map: { 0: 200 }, default: 502 }" },
	{ "[{unwrap: a, wrap: b}]", "1:2: each op must be a mapping with one key, e.g. '- unwrap: data'" },
	{ "[unwrap]", "1:2: each op must be a mapping with one key, e.g. '- unwrap: data'" },
	{ "{unwrap: data}", "1:1: expected a list of ops, e.g. [ { unwrap: data } ]" },
};

START_TEST(test_bad_ops)
{
	char err[512];
	struct rewrite_program *prog;

	prog = rewrite_program_from_yaml(bad_ops[_i].ops, strlen(bad_ops[_i].ops), err,
	    sizeof(err));
	ck_assert_ptr_null(prog);
	ck_assert_str_eq(err, bad_ops[_i].error);
}
END_TEST

/* Every span is either input bytes or a short literal; none is empty. */
START_TEST(test_spans_point_into_input)
{
	static const char in[] = "{\"code\":0,\"msg\":\"ok\",\"data\":{\"a\":[1,2]},\"debug\":{}}";
	static const char ops[] = "[drop: [debug], rename: {msg: message}, set: {gateway: g}]";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000);
	struct rewrite_result res;
	size_t i, from_input = 0;

	ck_assert_int_eq(rewrite_apply(ctx, prog, E, in, strlen(in), NULL, &res), 0);
	for (i = 0; i < res.nspans; i++) {
		ck_assert_uint_gt(res.spans[i].len, 0);
		if (res.spans[i].p >= in && res.spans[i].p + res.spans[i].len <= in + strlen(in))
			from_input += res.spans[i].len;
	}
	/* code, "msg":..."data":{...} are spliced: only the new key and set member are generated. */
	ck_assert_uint_ge(from_input, strlen("\"code\":0\"ok\"\"data\":{\"a\":[1,2]}"));
	ck_assert_uint_le(res.nspans, 10);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

static char *
nested(size_t depth, const char *prefix, const char *suffix)
{
	size_t pl = strlen(prefix), sl = strlen(suffix);
	char *s = malloc(pl + 2 * depth + sl + 1);

	memcpy(s, prefix, pl);
	memset(s + pl, '[', depth);
	memset(s + pl + depth, ']', depth);
	memcpy(s + pl + 2 * depth, suffix, sl + 1);
	return s;
}

START_TEST(test_depth_limit)
{
	static const char ops[] = "[unwrap: data]";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000);
	struct rewrite_result res;
	char *ok = nested(999, "{\"data\":", "}"), *deep = nested(1000, "{\"data\":", "}");

	/* The envelope is level 1: 999 arrays below it make 1000. */
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, ok, strlen(ok), NULL, &res), 0);
	ck_assert_uint_eq(res.total_len, 2 * 999);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, deep, strlen(deep), NULL, &res), -1);
	ck_assert_str_eq(res.error, "JSON nested too deep");
	ck_assert_int_eq(rewrite_apply(ctx, prog, F, ok, strlen(ok), NULL, &res), 0);
	ck_assert_int_eq(rewrite_apply(ctx, prog, F, deep, strlen(deep), NULL, &res), -1);
	free(ok);
	free(deep);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

/* 4 MB bodies of 10^6 nested arrays or 10^6 tiny elements: linear, well under 50 ms. */
START_TEST(test_linear_time)
{
	static const char ops[] = "[wrap: r]";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000);
	struct rewrite_result res;
	size_t n = 1000000, i;
	char *deep = nested(2 * n, "", ""), *wide = malloc(4 * n + 16);
	struct timespec a, b;
	double ms;

	memcpy(wide, "{\"d\":[", 6);
	for (i = 0; i < n; i++)
		memcpy(wide + 6 + 2 * i, "1,", 2);
	memcpy(wide + 6 + 2 * n - 1, "]}", 3);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, deep, strlen(deep), NULL, &res), -1);
	ck_assert_int_eq(rewrite_apply(ctx, prog, F, deep, strlen(deep), NULL, &res), -1);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, wide, strlen(wide), NULL, &res), 0);
	ck_assert_int_eq(rewrite_apply(ctx, prog, F, wide, strlen(wide), NULL, &res), 0);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	/* Generous for sanitizer and valgrind builds; a plain -O2 build takes a few ms. */
	ck_assert_msg(ms < (getenv("JG_SLOW") ? 5000.0 : 200.0), "took %.1f ms", ms);
	free(deep);
	free(wide);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

/* A body with NUL bytes is judged on its length, not on C string rules. */
START_TEST(test_embedded_nul)
{
	static const char ops[] = "[unwrap: data]";
	static const char in[] = "{\"data\":\"a\0b\"}";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000);
	struct rewrite_result res;

	ck_assert_int_eq(rewrite_apply(ctx, prog, F, in, sizeof(in) - 1, NULL, &res), -1);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, "{\"data\":1}\0", 11, NULL, &res), -1);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, "{\"data\":[\"\0\"]}", 14, NULL, &res), 0);
	ck_assert_uint_eq(res.total_len, 5);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

/* A NULL program (a route without ops) still validates and passes the body through. */
START_TEST(test_null_program)
{
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000);
	struct rewrite_result res;

	ck_assert_int_eq(rewrite_apply(ctx, NULL, E, " [1] ", 5, NULL, &res), 0);
	ck_assert_uint_eq(res.nspans, 1);
	ck_assert_uint_eq(res.total_len, 5);
	ck_assert_int_eq(rewrite_apply(ctx, NULL, E, "[1", 2, NULL, &res), -1);
	ck_assert_int_eq(rewrite_program_sets_status(NULL), 0);
	ck_assert_int_eq(rewrite_program_uses(NULL, REWRITE_VAR_SSL_CLIENT_S_DN), 0);
	rewrite_ctx_free(ctx);
}
END_TEST

/* Which variables a program uses: the caller computes only those per request. */
START_TEST(test_uses_vars)
{
	static const char ops[] = "[drop: [x], set: {a: 1, m: {v: $ssl_client_verify}}]";
	struct rewrite_program *prog;
	char err[256];

	prog = rewrite_program_from_yaml(ops, sizeof(ops) - 1, err, sizeof(err));
	ck_assert_ptr_nonnull(prog);
	ck_assert_int_eq(rewrite_program_uses(prog, REWRITE_VAR_SSL_CLIENT_VERIFY), 1);
	ck_assert_int_eq(rewrite_program_uses(prog, REWRITE_VAR_SSL_CLIENT_S_DN), 0);
	ck_assert_int_eq(rewrite_program_uses(prog, REWRITE_VAR_REQUEST_ID), 0);
	rewrite_program_free(prog);
}
END_TEST

START_TEST(test_escape)
{
	char out[64];
	size_t n;

	n = rewrite_json_escape(out, "a\"\\\x01\x1f\t\n\r\b\f/\x7f", 12);
	ck_assert_int_eq(memcmp(out, "a\\\"\\\\\\u0001\\u001f\\t\\n\\r\\b\\f/\x7f", n), 0);
	/* Overlong, surrogate, truncated and out-of-range sequences become U+FFFD. */
	n = rewrite_json_escape(out, "\xc0\xaf\xed\xa0\x80\xe2\x82", 7);
	ck_assert_uint_eq(n, 7 * 3);
	n = rewrite_json_escape(out, "\xf4\x90\x80\x80", 4);
	ck_assert_uint_eq(n, 4 * 3);
	n = rewrite_json_escape(out, "é€😀", 9);
	ck_assert_int_eq(memcmp(out, "é€😀", 9), 0);
	ck_assert_uint_eq(n, 9);
}
END_TEST

static Suite *
rewrite_suite(void)
{
	Suite *s = suite_create("rewrite");
	TCase *tc = tcase_create("ops");

	tcase_add_loop_test(tc, test_table, 0, (int)(sizeof(cases) / sizeof(cases[0])));
	tcase_add_loop_test(tc, test_bad_ops, 0, (int)(sizeof(bad_ops) / sizeof(bad_ops[0])));
	tcase_add_test(tc, test_spans_point_into_input);
	tcase_add_test(tc, test_depth_limit);
	tcase_add_test(tc, test_linear_time);
	tcase_add_test(tc, test_embedded_nul);
	tcase_add_test(tc, test_null_program);
	tcase_add_test(tc, test_uses_vars);
	tcase_add_test(tc, test_escape);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(rewrite_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
