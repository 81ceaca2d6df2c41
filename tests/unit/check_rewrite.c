/* Envelope ops end to end: YAML op list + input body -> exact output bytes and status. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
	/* the renamed member replaces one already called so: never a duplicate key */
	{ "[rename: {a: b}]", "{\"a\":1,\"b\":2}", "{\"b\":1}", 0, E },
	{ "[rename: {a: b}]", "{\"b\":2,\"a\":1,\"c\":3}", "{\"b\":1,\"c\":3}", 0, E },
	{ "[rename: {a: b}]", "{\"b\":2,\"c\":3}", "{\"b\":2,\"c\":3}", 0, E },
	{ "[rename: {a: b}]", "{\"b\":2,\"b\":3,\"a\":1}", "{\"b\":1}", 0, E },
	{ "[rename: {a: b, b: c}]", "{\"a\":1,\"b\":2}", "{\"b\":1,\"c\":2}", 0, E },
	{ "[rename: {b: c, a: b}]", "{\"a\":1,\"b\":2}", "{\"b\":1,\"c\":2}", 0, E },
	{ "[rename: {a: a}]", "{\"a\":1,\"a\":2}", "{\"a\":1,\"a\":2}", 0, E },
	{ "[rename: {d.a: b}]", "{\"d\":{\"a\":1,\"b\":2},\"b\":3}", "{\"d\":{\"b\":1},\"b\":3}", 0, E },
	{ "[rename: {a: b}, rename: {b: a}]", "{\"a\":1,\"b\":2}", "{\"a\":1}", 0, E },
	{ "[rename: {a: \"\\u0062\"}]", "{\"a\":1,\"b\":2}", "{\"b\":1}", 0, E },
	{ "[rename: {a: b}]", "{\"a\":1,\"\\u0062\":2}", "{\"b\":1}", 0, E },

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
	{ "[set: {u: $json.user.id, t: $json.tier, m: $json.missing}]", "{}",
	  "{\"u\":\"42\",\"t\":\"g\\\"old\",\"m\":null}", 0, E },
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
	{ "[status_from: {field: meta.code, map: {0: 200}}]", "{\"meta\":{\"code\":0}}", "{\"meta\":{\"code\":0}}", 200, E },
	{ "[status_from: {field: code, map: {0: 200}}]", "[0]", FAIL, 0, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}, unwrap: data]", "{\"code\":0,\"data\":[1]}", "[1]", 200, E },
	{ "[status_from: {field: ok, map: {true: 200, false: 500}}]", "{\"ok\":false}", "{\"ok\":false}", 500, E },
	{ "[status_from: {field: ok, map: {null: 204}}]", "{\"ok\":null}", "{\"ok\":null}", 204, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":0.0}", "{\"code\":0.0}", 200, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":1,\"code\":0}", "{\"code\":1,\"code\":0}", 200, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":{\"a\":0}}", "{\"code\":{\"a\":0}}", 502, E },
	{ "[status_from: {field: code, map: {0: 200}, default: 502}]", "{\"code\":0,}", FAIL, 0, E },
	{ "[status_from: {field: code, map: {0: 200}}, status_from: {field: c2, map: {1: 404}}]", "{\"code\":0,\"c2\":1}", "{\"code\":0,\"c2\":1}", 404, E },

	/* status_from: map keys by value, strings, ranges; unmapped keeps the status */
	{ "[status_from: {field: code, map: {0: 200}}]", "{\"code\":0e3}", "{\"code\":0e3}", 200, E },
	{ "[status_from: {field: code, map: {1: 201}}]", "{\"code\":1.0}", "{\"code\":1.0}", 201, E },
	{ "[status_from: {field: code, map: {1: 201}}]", "{\"code\":\"1\"}", "{\"code\":\"1\"}", 0, E },
	{ "[status_from: {field: code, map: {1: 201}, strings: true}]", "{\"code\":\"1\"}", "{\"code\":\"1\"}", 201, E },
	{ "[status_from: {field: code, map: {1: 201}, strings: true}]", "{\"code\":\"1.00\"}", "{\"code\":\"1.00\"}", 201, E },
	{ "[status_from: {field: code, map: {\"1\": 201}, strings: true}]", "{\"code\":1}", "{\"code\":1}", 201, E },
	{ "[status_from: {field: code, map: {\"1\": 201}}]", "{\"code\":1}", "{\"code\":1}", 0, E },
	{ "[status_from: {field: code, map: {5xx: 502, 503: 503}}]", "{\"code\":503}", "{\"code\":503}", 503, E },
	{ "[status_from: {field: code, map: {5xx: 502, 503: 503}}]", "{\"code\":500}", "{\"code\":500}", 502, E },
	{ "[status_from: {field: code, map: {5xx: 502, 503: 503}}]", "{\"code\":5.99e2}", "{\"code\":5.99e2}", 502, E },
	{ "[status_from: {field: code, map: {5xx: 502, 503: 503}}]", "{\"code\":599.5}", "{\"code\":599.5}", 0, E },
	{ "[status_from: {field: code, map: {5xx: 502, 503: 503}}]", "{\"code\":600}", "{\"code\":600}", 0, E },
	{ "[status_from: {field: code, map: {5xx: 502}}]", "{\"code\":\"550\"}", "{\"code\":\"550\"}", 0, E },
	{ "[status_from: {field: code, map: {5xx: 502}, strings: true}]", "{\"code\":\"550\"}", "{\"code\":\"550\"}", 502, E },
	{ "[status_from: {field: code, map: {1xx: 409}, default: 500}]", "{\"code\":\"x\"}", "{\"code\":\"x\"}", 500, E },
	{ "[status_from: {field: n, map: {9007199254740993: 201}}]", "{\"n\":9007199254740992}", "{\"n\":9007199254740992}", 0, E },
	{ "[status_from: {field: n, map: {9007199254740993: 201}}]", "{\"n\":9007199254740993}", "{\"n\":9007199254740993}", 201, E },
	{ "[status_from: {field: a, map: {1: 401}}, status_from: {field: b, map: {1: 404}}]", "{\"a\":1,\"b\":2}", "{\"a\":1,\"b\":2}", 401, E },

	/* when: an op whose condition does not hold is skipped, the others run */
	{ "[status_from: {field: code, map: {0: 200, 1001: 401, 404: 404}}, {unwrap: data, when: {field: code, equals: 0}}]",
	  "{\"code\":0,\"data\":{\"id\":1}}", "{\"id\":1}", 200, E },
	{ "[status_from: {field: code, map: {0: 200, 1001: 401, 404: 404}}, {unwrap: data, when: {field: code, equals: 0}}]",
	  "{\"code\":1001,\"msg\":\"invalid token\",\"data\":null}", "{\"code\":1001,\"msg\":\"invalid token\",\"data\":null}", 401, E },
	{ "[status_from: {field: code, map: {0: 200, 1001: 401, 404: 404}}, {unwrap: data, when: {field: code, equals: 0}}]",
	  "{\"code\":7,\"data\":1}", "{\"code\":7,\"data\":1}", 0, E },
	{ "[{drop: [a], when: {field: a, equals: 2}}, set: {y: 1}]", "{\"a\":1}", "{\"a\":1,\"y\":1}", 0, E },
	{ "[{drop: [a], when: {field: a, equals: 1.0}}, set: {y: 1}]", "{\"a\":1}", "{\"y\":1}", 0, E },
	{ "[{set: {ok: true}, when: {field: s, equals: ab}}]", "{\"s\":\"a\\u0062\"}", "{\"s\":\"a\\u0062\",\"ok\":true}", 0, E },
	{ "[rename: {a: b}, {set: {x: 1}, when: {field: b, exists: true}}]", "{\"a\":1}", "{\"b\":1,\"x\":1}", 0, E },
	{ "[rename: {a: b}, {set: {x: 1}, when: {field: a, exists: true}}]", "{\"a\":1}", "{\"b\":1}", 0, E },
	{ "[set: {m.k: v}, {set: {x: 1}, when: {field: m, type: object}}]", "{}", "{\"m\":{\"k\":\"v\"},\"x\":1}", 0, E },
	{ "[set: {m: {k: v}}, {set: {x: 1}, when: {field: m.k, equals: v}}]", "{}", "{\"m\":{\"k\":\"v\"},\"x\":1}", 0, E },
	{ "[unwrap: data, {wrap: w, when: {field: id, in: [1, 2]}}]", "{\"data\":{\"id\":2}}", "{\"w\":{\"id\":2}}", 0, E },
	{ "[{set: {x: 1}, when: {status: 2xx}}]", "{}", "{\"x\":1}", 0, E },
	{ "[{set: {x: 1}, when: {status: 5xx}}]", "{}", "{}", 0, E },
	{ "[status_from: {field: c, map: {1: 503}}, {set: {x: 1}, when: {status: 5xx}}]", "{\"c\":1}", "{\"c\":1,\"x\":1}", 503, E },
	{ "[{set: {x: 1}, when: {all: [{status: 200}, {not: {field: e, exists: true}}]}}]", "{\"e\":0}", "{\"e\":0}", 0, E },
	{ "[{set: {x: 1}, when: {any: [{status: 404}, {field: msg, prefix: ok}]}}]", "{\"msg\":\"okay\"}", "{\"msg\":\"okay\",\"x\":1}", 0, E },
	{ "[{unwrap: data, when: {field: code, equals: 0}}]", "[1]", "[1]", 0, E },
	/* when: keys compared as decoded text, values read where the ops left them */
	{ "[{set: {x: 1}, when: {field: code, equals: 0}}]", "{\"\\u0063ode\":0}", "{\"\\u0063ode\":0,\"x\":1}", 0, E },
	{ "[{set: {ok: true}, when: {field: 'a\\u0062', exists: true}}]", "{\"a\\u0062\":1}", "{\"a\\u0062\":1}", 0, E },
	{ "[{set: {ok: true}, when: {field: 'a\\u0062', exists: true}}]", "{\"a\\\\u0062\":1}", "{\"a\\\\u0062\":1,\"ok\":true}", 0, E },
	{ "[{set: {x: 1}, when: {field: a.b, exists: true}}]", "{\"a\":1}", "{\"a\":1}", 0, E },
	{ "[{set: {x: 1}, when: {field: a.b, exists: true}}]", "{\"a\":{\"b\":null}}", "{\"a\":{\"b\":null},\"x\":1}", 0, E },
	{ "[{set: {x: 1}, when: {field: a.b, equals: 2}}]", "{\"a\":{\"b\":1},\"a\":{\"b\":2}}", "{\"a\":{\"b\":1},\"a\":{\"b\":2},\"x\":1}", 0, E },
	{ "[set: {a: 2}, {set: {x: 1}, when: {field: a, equals: 2}}]", "{\"a\":1}", "{\"a\":2,\"x\":1}", 0, E },
	{ "[drop: [a], {set: {x: 1}, when: {field: a, exists: true}}]", "{\"a\":1}", "{}", 0, E },
	{ "[{unwrap: data, when: {field: code, equals: 0}}]", "{\"code\":0,}", FAIL, 0, E },
	{ "[{unwrap: data, when: {field: code, equals: 0}}]", "{\"code\":1,\"x\":[}", FAIL, 0, E },
	{ "[{unwrap: data, when: {field: code, equals: 1}}]", "{\"code\":0} x", FAIL, 0, E },

	/* rename within the parent object, old and new named by paths */
	{ "[rename: {data.name: data.title}]", "{\"data\":{\"name\":\"n\"},\"name\":1}", "{\"data\":{\"title\":\"n\"},\"name\":1}", 0, E },
	{ "[rename: {a.b.c: a.b.d}]", "{\"a\":{\"b\":{\"c\":1,\"d\":2}}}", "{\"a\":{\"b\":{\"d\":1}}}", 0, E },

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

/* Request headers as the engine asks for them: by name, in any case. */
static int
header_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	static const struct { const char *name, *value; } headers[] = {
		{ "accept", "*/*" }, { "x-foo", "b\"ar\n" },
	};
	size_t i;

	ck_assert_ptr_eq(arg, header_cb);
	for (i = 0; i < sizeof(headers) / sizeof(headers[0]); i++)
		if (strlen(headers[i].name) == len && strncasecmp(headers[i].name, name, len) == 0) {
			*value = (struct rewrite_str){ headers[i].value, strlen(headers[i].value) };
			return 1;
		}
	return 0;
}

/* Request body fields as route_scan gives them: the text of each, by path. */
static int
json_cb(const void *arg, const char *path, size_t len, struct rewrite_str *value)
{
	static const struct { const char *path, *value; } fields[] = {
		{ "user.id", "42" }, { "tier", "g\"old" },
	};
	size_t i;

	ck_assert_ptr_eq(arg, json_cb);
	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (strlen(fields[i].path) == len && memcmp(fields[i].path, path, len) == 0) {
			*value = (struct rewrite_str){ fields[i].value, strlen(fields[i].value) };
			return 1;
		}
	return 0;
}

static void
vars_init(struct rewrite_vars *v)
{
	memset(v, 0, sizeof(*v));
	v->request_id = (struct rewrite_str){ "abc-123", 7 };
	v->route = (struct rewrite_str){ "r\"o\\u\x01te", 8 };
	v->upstream = (struct rewrite_str){ "up\xff\xc3x", 5 };
	v->remote_addr = (struct rewrite_str){ "127.0.0.1", 9 };
	v->ssl_client_s_dn = (struct rewrite_str){ "CN=client \"one\",O=Acme\\, Inc.", 29 };
	v->ssl_client_verify = (struct rewrite_str){ "SUCCESS", 7 };
	v->now = 1000000000;
	v->status = 200;
	v->header_cb = header_cb;
	v->header_arg = (const void *)header_cb;
	v->json_cb = json_cb;
	v->json_arg = (const void *)json_cb;
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
	char err[256], *out;
	int r;

	prog = rewrite_program_from_yaml(c->ops, strlen(c->ops), err, sizeof(err));
	ck_assert_msg(prog != NULL, "case %d: ops %s: %s", _i, c->ops, err);
	vars_init(&vars);
	ctx = rewrite_ctx_new(1000, 100000);
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
	{ "[rename: {a: c, b: c}]", "1:10: rename: 'a' and 'b' both become 'c'" },
	{ "[rename: {data.name: title.x}]", "1:22: rename: 'data.name' to 'title.x' would move the key to another object; name the new key alone or in the same object" },
	{ "[rename: {name: data.title}]", "1:17: rename: 'name' to 'data.title' would move the key to another object; name the new key alone or in the same object" },
	{ "[rename: {a.b.c: a.x.c}]", "1:18: rename: 'a.b.c' to 'a.x.c' would move the key to another object; name the new key alone or in the same object" },
	{ "[rename: {a: b..c}]", "1:14: rename: empty key in path 'b..c'" },
	{ "[{unwrap: a, when: 1}]", "1:20: a condition is a mapping such as { field: code, equals: 0 }, { status: [ 2xx ] }, or all:, any:, not: of conditions" },
	{ "[{unwrap: a, when: {field: a}}]", "1:20: field needs one test: equals, in, prefix, exists or type" },
	{ "[{unwrap: a, when: {status: 700}}]", "1:29: status expects a status, a class or a range, or a list of them, e.g. [ 200, 3xx, 400..403 ]" },
	{ "[{unwrap: [a], when: {fld: 1}}]", "1:11: unwrap must be a key or a dotted path such as data.result" },
	{ "[{when: {status: 200}}]", "1:2: each op must be a mapping with one op key and, optionally, when, e.g. '- unwrap: data'" },
	{ "[{unwrap: a, when: {status: 200}, when: {status: 201}}]", "1:35: duplicate key 'when' (first at line 1)" },
	{ "[{unwrap: a, wrap: b, when: {status: 200}}]", "1:2: each op must be a mapping with one op key and, optionally, when, e.g. '- unwrap: data'" },
	{ "[status_from: {field: c, map: {0: 200, 0.0: 201}}]", "1:40: duplicate key '0.0' in status_from map" },
	{ "[status_from: {field: c, map: {5xx: 500, 5XX: 501}}]", "1:42: duplicate key '5XX' in status_from map" },
	{ "[status_from: {field: c, map: {0: 200}, strings: yes}]", "1:50: status_from strings expects true or false" },
	{ "[rename: {x.a: c, x.b: c}]", "1:10: rename: 'a' and 'b' both become 'c'" },
	{ "[set: []]", "1:7: set expects a non-empty mapping, e.g. { gateway: jsongate }" },
	{ "[set: {a: $nope}]", "1:11: unknown variable '$nope' (expected $request_id, $route, $upstream, $remote_addr, $client_addr, $time_iso8601, $header.NAME, $json.PATH, $path.NAME, $jwt.CLAIM, $api_key, $ssl_client_s_dn, $ssl_client_verify; $$ for a literal $)" },
	{ "[set: {a: \"$header.\"}]", "1:11: unknown variable '$header.' (expected $request_id, $route, $upstream, $remote_addr, $client_addr, $time_iso8601, $header.NAME, $json.PATH, $path.NAME, $jwt.CLAIM, $api_key, $ssl_client_s_dn, $ssl_client_verify; $$ for a literal $)" },
	{ "[set: {a: $header.a:b}]", "1:11: bad header name in variable '$header.a:b'" },
	{ "[set: {a: $json.a..b}]", "1:11: bad path in variable '$json.a..b': an empty key or more than 32 keys" },
	{ "[set: {a: \"$json.\"}]", "1:11: unknown variable '$json.' (expected $request_id, $route, $upstream, $remote_addr, $client_addr, $time_iso8601, $header.NAME, $json.PATH, $path.NAME, $jwt.CLAIM, $api_key, $ssl_client_s_dn, $ssl_client_verify; $$ for a literal $)" },
	{ "[set: {a: $path.id}]", "1:11: variable '$path.id': the route's match.path is not a path template" },
	{ "[set: {a: {[1]: 2}}]", "1:12: object keys in a set value must be scalars" },
	{ "[status_from: {map: {0: 200}}]", "1:15: status_from needs a field, e.g. { field: code, map: { 0: 200 } }" },
	{ "[status_from: {field: code}]", "1:15: status_from needs a map of field values to statuses, e.g. { field: code, map: { 0: 200, 1001: 401 } }" },
	{ "[status_from: {field: code, default: 502}]", "1:15: status_from needs a map of field values to statuses, e.g. { field: code, map: { 0: 200, 1001: 401 } }" },
	{ "[status_from: {field: c, default: 99}]", "1:35: status must be an HTTP status code between 100 and 599" },
	{ "[status_from: {field: c, map: {0: abc}}]", "1:35: status must be an HTTP status code between 100 and 599" },
	{ "[status_from: {field: c, map: [1]}]", "1:31: status_from map must be a mapping of field values to status codes, e.g. { 0: 200, 404: 404, 5xx: 502 }" },
	{ "[status_from: {field: c, map: {0: 200, 0: 201}}]", "1:40: duplicate key '0' in status_from map" },
	{ "[status_from: {field: c, mapp: {}}]", "1:26: unknown key 'mapp' in status_from (expected field, map, default, strings)" },
	{ "[status_from: {field: c, map: {0: 200}, field: d}]", "1:41: duplicate key 'field' (first at line 1)" },
	{ "[rename: {a: b, a: c}]", "1:17: duplicate key 'a' (first at line 1)" },
	{ "[set: {a: 1, b: 2, a: 3}]", "1:20: duplicate key 'a' (first at line 1)" },
	{ "[status_from: 1]", "1:15: status_from expects a non-empty mapping, e.g. { field: code, map: { 0: 200, 1001: 401 } }" },
	{ "[{unwrap: a, wrap: b}]", "1:2: each op must be a mapping with one op key and, optionally, when, e.g. '- unwrap: data'" },
	{ "[unwrap]", "1:2: each op must be a mapping with one op key and, optionally, when, e.g. '- unwrap: data'" },
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

static int
path_cb(const void *arg, const char *name, size_t len, struct rewrite_str *value)
{
	(void)arg;
	if (len != 2 || memcmp(name, "id", 2) != 0)
		return 0;
	*value = (struct rewrite_str){ "a\"/\xff", 4 };
	return 1;
}

/* $path.NAME loads for a route whose path template has the capture, and splices what the
 * caller gives (null without it); a time no year can hold is null too. */
START_TEST(test_path_template)
{
	static const char ops[] = "[set: {id: $path.id, r: $path.rest, t: $time_iso8601}]";
	static const char in[] = "{\"x\":1}";
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct rewrite_program *prog;
	struct rewrite_result res;
	struct rewrite_vars vars;
	char err[256], *out;

	ck_assert_ptr_null(rewrite_program_from_yaml(ops, strlen(ops), err, sizeof(err)));
	ck_assert_str_eq(err, "1:12: variable '$path.id': the route's match.path is not a path "
	    "template");
	ck_assert_ptr_null(rewrite_program_from_yaml_route(ops, strlen(ops), "/u/{id}", err,
	    sizeof(err)));
	ck_assert_str_eq(err, "1:25: variable '$path.rest': the route's path template has no "
	    "such capture");
	ck_assert_ptr_null(rewrite_program_from_yaml_route(ops, strlen(ops), "u/{id}", err,
	    sizeof(err)));
	ck_assert_str_eq(err, "path template: a path template must start with '/'");
	prog = rewrite_program_from_yaml_route(ops, strlen(ops), "/u/{id}/{rest...}", err,
	    sizeof(err));
	ck_assert_msg(prog != NULL, "%s", err);
	ck_assert(rewrite_program_uses(prog, REWRITE_VAR_PATH));

	vars_init(&vars);
	vars.path_cb = path_cb;
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, in, strlen(in), &vars, &res), 0);
	out = join(&res);
	ck_assert_str_eq(out, "{\"x\":1,\"id\":\"a\\\"/\xef\xbf\xbd\",\"r\":null,"
	    "\"t\":\"2001-09-09T01:46:40+00:00\"}");
	free(out);
	vars.path_cb = NULL;
	vars.now = LLONG_MAX;
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, in, strlen(in), &vars, &res), 0);
	out = join(&res);
	ck_assert_str_eq(out, "{\"x\":1,\"id\":null,\"r\":null,\"t\":null}");
	free(out);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

/* Every span is either input bytes or a short literal; none is empty. */
START_TEST(test_spans_point_into_input)
{
	static const char in[] = "{\"code\":0,\"msg\":\"ok\",\"data\":{\"a\":[1,2]},\"debug\":{}}";
	static const char ops[] = "[drop: [debug], rename: {msg: message}, set: {gateway: g}]";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
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
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
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

/*
 * 4 MB bodies of 10^6 nested arrays or 10^6 tiny elements, and an object of 50,000 members
 * whose values are containers: linear, well under 50 ms.
 */
START_TEST(test_linear_time)
{
	static const char ops[] = "[wrap: r]", ops2[] = "[set: {x: 1}]";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_program *prog2 = rewrite_program_from_yaml(ops2, strlen(ops2), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct rewrite_result res;
	size_t n = 1000000, i;
	char *deep = nested(2 * n, "", ""), *wide = malloc(4 * n + 16), *many = malloc(n / 2);
	size_t nmany = 0;
	struct timespec a, b;
	double ms;

	memcpy(wide, "{\"d\":[", 6);
	for (i = 0; i < n; i++)
		memcpy(wide + 6 + 2 * i, "1,", 2);
	memcpy(wide + 6 + 2 * n - 1, "]}", 3);
	many[nmany++] = '{';
	for (i = 0; i < 50000; i++) {
		memcpy(many + nmany, "\"a\":[],", 7);
		nmany += 7;
	}
	many[nmany - 1] = '}';
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, deep, strlen(deep), NULL, &res), -1);
	ck_assert_int_eq(rewrite_apply(ctx, prog, F, deep, strlen(deep), NULL, &res), -1);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, wide, strlen(wide), NULL, &res), 0);
	ck_assert_int_eq(rewrite_apply(ctx, prog, F, wide, strlen(wide), NULL, &res), 0);
	ck_assert_int_eq(rewrite_apply(ctx, prog2, E, many, nmany, NULL, &res), 0);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	/* Generous for sanitizer and valgrind builds; a plain -O2 build takes a few ms. */
	ck_assert_msg(ms < (getenv("JG_SLOW") ? 5000.0 : 200.0), "took %.1f ms", ms);
	free(deep);
	free(wide);
	free(many);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
	rewrite_program_free(prog2);
}
END_TEST

/*
 * limits.max_members counts the members of every object the ops tokenize in one body; a body
 * with more fails (on_error applies), and the same ctx then serves small bodies again.
 */
START_TEST(test_max_members)
{
	static const char ops[] = "[drop: [a.x, b.x]]";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 5);
	struct rewrite_result res;
	const char *five = "{\"a\":{\"x\":1,\"y\":2},\"b\":{\"x\":3}}";
	const char *six = "{\"a\":{\"x\":1,\"y\":2},\"b\":{\"x\":3,\"z\":4}}";
	const char *flat = "{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6}";
	const char *aside = "{\"q\":{\"1\":1,\"2\":2,\"3\":3,\"4\":4,\"5\":5,\"6\":6}}";
	char *out;

	ck_assert_int_eq(rewrite_apply(ctx, prog, E, five, strlen(five), NULL, &res), 0);
	out = join(&res);
	ck_assert_str_eq(out, "{\"a\":{\"y\":2},\"b\":{}}");
	free(out);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, six, strlen(six), NULL, &res), -1);
	ck_assert_str_eq(res.error, "more members to edit than limits.max_members");
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, flat, strlen(flat), NULL, &res), -1);
	ck_assert_str_eq(res.error, "more members to edit than limits.max_members");
	/* Objects the ops do not look into are not counted. */
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, aside, strlen(aside), NULL, &res), 0);
	rewrite_ctx_release(ctx);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, five, strlen(five), NULL, &res), 0);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

struct sunk {
	char buf[4096];
	size_t len;
	unsigned calls;
};

static int
sink_cb(void *arg, const struct rewrite_span *spans, size_t n)
{
	struct sunk *k = arg;
	size_t i;

	k->calls++;
	for (i = 0; i < n; i++) {
		ck_assert_uint_gt(spans[i].len, 0);
		ck_assert_uint_le(k->len + spans[i].len, sizeof(k->buf));
		memcpy(k->buf + k->len, spans[i].p, spans[i].len);
		k->len += spans[i].len;
	}
	return k->calls == 3 ? -1 : 0;  /* the third call fails */
}

/* With a sink the output arrives in batches, identical to the collected spans. */
START_TEST(test_sink)
{
	static const char ops[] = "[rename: {a: b}]";
	struct rewrite_program *prog = rewrite_program_from_yaml(ops, strlen(ops), NULL, 0);
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct rewrite_result res;
	struct sunk k = { .len = 0 };
	char in[4096], *want;
	size_t n = 0;
	int i;

	/* 200 renamed members make about 400 spans: more than one batch. */
	n += (size_t)sprintf(in, "{");
	for (i = 0; i < 200; i++)
		n += (size_t)sprintf(in + n, "%s\"a\":%d", i ? "," : "", i);
	n += (size_t)sprintf(in + n, "}");
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, in, n, NULL, &res), 0);
	want = join(&res);
	rewrite_ctx_sink(ctx, sink_cb, &k);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, in, n, NULL, &res), 0);
	ck_assert_uint_eq(res.nspans, 0);
	ck_assert_uint_eq(res.total_len, strlen(want));
	ck_assert_uint_eq(k.len, strlen(want));
	ck_assert_int_eq(memcmp(k.buf, want, k.len), 0);
	ck_assert_uint_eq(k.calls, 2);
	k.len = 0;
	k.calls = 1;
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, in, n, NULL, &res), -1);
	ck_assert_str_eq(res.error, "cannot write the output");
	free(want);
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
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct rewrite_result res;

	ck_assert_int_eq(rewrite_apply(ctx, prog, F, in, sizeof(in) - 1, NULL, &res), -1);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, "{\"data\":1}\0", 11, NULL, &res), -1);
	ck_assert_int_eq(rewrite_apply(ctx, prog, E, "{\"data\":[\"\0\"]}", 14, NULL, &res), 0);
	ck_assert_uint_eq(res.total_len, 5);
	rewrite_ctx_free(ctx);
	rewrite_program_free(prog);
}
END_TEST

/* RFC 8259 forbids a byte order mark: the failure says so, in both modes and for any op. */
START_TEST(test_bom)
{
	static const char *const programs[] = { "[unwrap: data]", "[set: {a: 1}]", "[wrap: w]", "[]" };
	static const char in[] = "\xef\xbb\xbf{\"data\":1}";
	static const char inside[] = "{\"data\":\"\xef\xbb\xbf\"}";
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct rewrite_program *prog;
	struct rewrite_result res;
	size_t i;

	for (i = 0; i < sizeof(programs) / sizeof(programs[0]); i++) {
		prog = rewrite_program_from_yaml(programs[i], strlen(programs[i]), NULL, 0);
		ck_assert_int_eq(rewrite_apply(ctx, prog, E, in, strlen(in), NULL, &res), -1);
		ck_assert_str_eq(res.error,
		    "body starts with a UTF-8 byte order mark (RFC 8259 forbids it)");
		ck_assert_int_eq(rewrite_apply(ctx, prog, F, in, strlen(in), NULL, &res), -1);
		ck_assert_str_eq(res.error,
		    "body starts with a UTF-8 byte order mark (RFC 8259 forbids it)");
		/* Only at the start: inside a string it is a character like any other. */
		ck_assert_int_eq(rewrite_apply(ctx, prog, F, inside, strlen(inside), NULL, &res), 0);
		rewrite_program_free(prog);
	}
	rewrite_ctx_free(ctx);
}
END_TEST

/* A failure says whether the body is not JSON, or the ops could not apply to one. */
START_TEST(test_failure_kind)
{
	static const struct {
		const char *ops, *in;
		int invalid;
	} failures[] = {
		{ "[unwrap: data]", "{\"data\":", 1 },
		{ "[unwrap: data]", "{\"data\":1} x", 1 },
		{ "[unwrap: data]", "\xef\xbb\xbf{\"data\":1}", 1 },
		{ "[unwrap: data]", "  ", 1 },
		{ "[wrap: w]", "[1,", 1 },
		{ "[unwrap: data]", "{\"other\":1}", 0 },
		{ "[set: {a: 1}]", "[1]", 0 },
		{ "[set: {a.b: 1}]", "{\"a\":2}", 0 },
		{ "[unwrap: data]", "{\"data\":[[[[1]]]]}", 0 },     /* deeper than max_depth */
		{ "[set: {x: 1}]", "{\"a\":1,\"b\":2,\"c\":3,\"d\":4}", 0 },  /* max_members */
	};
	struct rewrite_ctx *ctx = rewrite_ctx_new(4, 3);
	struct rewrite_program *prog;
	struct rewrite_result res;
	size_t i;
	int mode;

	for (i = 0; i < sizeof(failures) / sizeof(failures[0]); i++)
		for (mode = 0; mode < 2; mode++) {
			prog = rewrite_program_from_yaml(failures[i].ops, strlen(failures[i].ops), NULL, 0);
			ck_assert_ptr_nonnull(prog);
			ck_assert_int_eq(rewrite_apply(ctx, prog, mode ? F : E, failures[i].in,
			    strlen(failures[i].in), NULL, &res), -1);
			ck_assert_msg(res.invalid == failures[i].invalid, "%s on %s (%s): %s, invalid %d",
			    failures[i].ops, failures[i].in, mode ? "full" : "envelope", res.error,
			    res.invalid);
			rewrite_program_free(prog);
		}
	rewrite_ctx_free(ctx);
}
END_TEST

/* A NULL program (a route without ops) still validates and passes the body through. */
START_TEST(test_null_program)
{
	struct rewrite_ctx *ctx = rewrite_ctx_new(1000, 100000);
	struct rewrite_result res;

	ck_assert_int_eq(rewrite_apply(ctx, NULL, E, " [1] ", 5, NULL, &res), 0);
	ck_assert_uint_eq(res.nspans, 1);
	ck_assert_uint_eq(res.total_len, 5);
	ck_assert_int_eq(rewrite_apply(ctx, NULL, E, "[1", 2, NULL, &res), -1);
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
	tcase_add_test(tc, test_path_template);
	tcase_add_test(tc, test_depth_limit);
	tcase_add_test(tc, test_linear_time);
	tcase_add_test(tc, test_embedded_nul);
	tcase_add_test(tc, test_max_members);
	tcase_add_test(tc, test_sink);
	tcase_add_test(tc, test_null_program);
	tcase_add_test(tc, test_bom);
	tcase_add_test(tc, test_failure_kind);
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
