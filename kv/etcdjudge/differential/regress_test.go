package differential

// regressions are the differences the judge found in keel, each as the minimal
// operation list it printed (made by hand where the generator has changed since);
// they run before the random sequences, every time. An operation list, not a seed:
// a seed means other operations once the generator changes.
var regressions = []struct {
	bug string
	ops []op
}{
	{"the responses inside a Txn had no header (etcd gives each one its revision)", []op{
		put("b", "old"),
		{kind: kTxn, then: []op{get("a"), del("b"), put("a", "x"), get("a"), del("d"),
			{kind: kTxn, then: []op{put("c", "y")}}}},
	}},
	{`a Txn deleting from a key on ("\x00") and putting a key in that range in a nested Txn was ` +
		`refused as "duplicate key given" (etcd's check lets it through and runs both)`, []op{
		{kind: kTxn, then: []op{{kind: kDelete, rng: rng{key: "a", kind: endFrom}},
			{kind: kTxn, then: []op{put("c", "z")}}}},
		get("c"),
	}},
	{"a Range's count left out the keys its min/max revision filters dropped (etcd counts the whole range)", []op{
		put("a", "x"), put("b", "y"),
		{kind: kGet, rng: rng{kind: endPrefix}, rank: -1, minMod: 2, maxMod: -1, minCre: -1, maxCre: -1},
		{kind: kGet, rng: rng{kind: endPrefix}, rank: -1, minMod: -1, maxMod: -1, minCre: -1, maxCre: 1, limit: 1},
	}},
	{"a count_only Range with a limit below its count answered more=true (etcd: false, it returns no keys)", []op{
		put("a", "x"), put("b", "y"),
		{kind: kGet, rng: rng{kind: endPrefix}, rank: -1, minMod: -1, maxMod: -1, minCre: -1, maxCre: -1, limit: 1, countOnl: true},
	}},
}

func put(k, v string) op { return op{kind: kPut, rng: rng{key: k}, value: v, lease: -1, prevKV: true} }

func get(k string) op {
	return op{kind: kGet, rng: rng{key: k}, rank: -1, minMod: -1, maxMod: -1, minCre: -1, maxCre: -1}
}

func del(k string) op { return op{kind: kDelete, rng: rng{key: k}, prevKV: true} }
