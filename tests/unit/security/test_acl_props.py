"""Property tests of the authorizer's matching rules (broker/security/acl.py), as Kafka's AclAuthorizer decides."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.security.acl import (
    IMPLIED_BY,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    Binding,
    Entry,
    Filter,
    Operation,
    Pattern,
    PatternType,
    Permission,
    ResourceType,
    decide,
)

TYPES = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID]
OPS = [o for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY)]
ASKED = [o for o in OPS if o != Operation.ALL]
names = st.text(alphabet="abc-", min_size=1, max_size=5)
principals = st.sampled_from(["User:alice", "User:bob", WILDCARD_PRINCIPAL])
hosts = st.sampled_from(["127.0.0.1", "10.0.0.1", WILDCARD])
patterns = st.builds(Pattern, st.sampled_from(TYPES), st.one_of(names, st.just(WILDCARD)),
                     st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]))  # fmt: skip
entries = st.builds(Entry, principals, hosts, st.sampled_from(OPS), st.sampled_from([Permission.ALLOW,
                                                                                        Permission.DENY]))  # fmt: skip
bindings = st.lists(st.builds(Binding, patterns, entries), max_size=8)
requests = st.tuples(st.sampled_from(["User:alice", "User:bob"]), st.sampled_from(["127.0.0.1", "10.0.0.1"]),
                     st.sampled_from(ASKED), st.sampled_from(TYPES), names)  # fmt: skip


def covers(p: Pattern, rtype: ResourceType, name: str) -> bool:
    """The resource matching rule, written out independently of `Pattern.matches_resource`."""
    if p.resource_type != rtype:
        return False
    if p.pattern_type == PatternType.PREFIXED:
        return name[: len(p.name)] == p.name
    return p.name in (name, WILDCARD)


@given(bindings, requests, st.booleans())
def test_deny_always_wins(acls, req, allow_if_none):
    principal, host, op, rtype, name = req
    deny = Binding(Pattern(rtype, name), Entry(principal, host, op, Permission.DENY))
    assert not decide([*acls, deny], principal, host, op, rtype, name, allow_if_no_acl=allow_if_none)


@given(bindings, requests)
def test_a_deny_of_all_denies_every_operation_and_an_allow_of_all_allows_it(acls, req):
    principal, host, op, rtype, name = req
    allow_all = Binding(Pattern(rtype, WILDCARD), Entry(WILDCARD_PRINCIPAL, WILDCARD, Operation.ALL, Permission.ALLOW))
    mine = [b for b in acls if b.entry.permission == Permission.ALLOW]
    assert decide([*mine, allow_all], principal, host, op, rtype, name)
    deny_all = Binding(Pattern(rtype, name[:1], PatternType.PREFIXED),
                       Entry(principal, WILDCARD, Operation.ALL, Permission.DENY))  # fmt: skip
    assert not decide([*mine, allow_all, deny_all], principal, host, op, rtype, name)


@given(bindings, requests)
def test_super_users_always_pass(acls, req):
    principal, host, op, rtype, name = req
    assert decide(acls, principal, host, op, rtype, name, super_users=frozenset({principal}))


@given(bindings, requests, st.booleans())
def test_no_acl_on_the_resource_means_the_default(acls, req, allow_if_none):
    principal, host, op, rtype, name = req
    on_it = [b for b in acls if covers(b.pattern, rtype, name)]
    got = decide(acls, principal, host, op, rtype, name, allow_if_no_acl=allow_if_none)
    if not on_it:
        assert got is allow_if_none
    else:  # an ACL for someone else on the resource: the default no longer applies
        assert got == decide(on_it, principal, host, op, rtype, name, allow_if_no_acl=not allow_if_none)


@given(names, names, st.sampled_from(TYPES))
def test_a_prefixed_acl_matches_exactly_the_names_with_its_prefix(prefix, name, rtype):
    p = Pattern(rtype, prefix, PatternType.PREFIXED)
    assert p.matches_resource(rtype, name) == name.startswith(prefix)
    assert p.matches_resource(rtype, prefix + name)
    other = next(t for t in TYPES if t != rtype)
    assert not p.matches_resource(other, prefix + name)


@given(names, names, st.sampled_from(TYPES))
def test_a_literal_acl_matches_its_name_and_the_wildcard_every_name(acl_name, name, rtype):
    assert Pattern(rtype, acl_name).matches_resource(rtype, name) == (acl_name == name)
    assert Pattern(rtype, WILDCARD).matches_resource(rtype, name)


@given(st.sampled_from(sorted(IMPLIED_BY)), requests)
def test_implied_operations_are_allowed_but_a_deny_implies_nothing(op, req):
    principal, host, _, rtype, name = req
    for by in IMPLIED_BY[op]:
        allow = Binding(Pattern(rtype, name), Entry(principal, host, by, Permission.ALLOW))
        assert decide([allow], principal, host, op, rtype, name)
        if by != op:
            deny = Binding(Pattern(rtype, name), Entry(principal, host, by, Permission.DENY))
            assert not decide([deny], principal, host, op, rtype, name, allow_if_no_acl=True)  # an ACL exists
            assert not decide([deny], principal, host, by, rtype, name, allow_if_no_acl=True)
            # the deny of `by` does not deny `op` itself when `op` is allowed
            assert decide([deny, Binding(Pattern(rtype, name), Entry(principal, host, op, Permission.ALLOW))],
                          principal, host, op, rtype, name)  # fmt: skip


@given(requests)
def test_an_allow_for_another_principal_or_host_does_not_count(req):
    principal, host, op, rtype, name = req
    other = "User:carol"
    assert not decide([Binding(Pattern(rtype, name), Entry(other, host, op, Permission.ALLOW))],
                      principal, host, op, rtype, name)  # fmt: skip
    assert not decide([Binding(Pattern(rtype, name), Entry(principal, "192.0.2.1", op, Permission.ALLOW))],
                      principal, host, op, rtype, name)  # fmt: skip


@given(bindings)
def test_the_filter_any_matches_everything(acls):
    assert all(Filter().matches(b) for b in acls)


@given(patterns, names)
def test_a_match_filter_finds_the_patterns_an_authorization_would_use(p, name):
    f = Filter(p.resource_type, name, PatternType.MATCH)
    assert f.matches_pattern(p) == covers(p, p.resource_type, name)


@given(patterns, patterns)
def test_a_specific_filter_matches_only_its_own_pattern(p, q):
    f = Filter(p.resource_type, p.name, p.pattern_type)
    assert f.matches_pattern(q) == (p == q)


def test_decide_any_as_kafka_authorize_by_resource_type() -> None:
    """A literal Deny cancels only the literal Allow of its own name; a prefixed Deny cancels every Allow under it."""
    from broker.security.acl import decide_any

    def b(name: str, ptype: PatternType, perm: Permission) -> Binding:
        return Binding(Pattern(ResourceType.TOPIC, name, ptype), Entry("User:a", WILDCARD, Operation.WRITE, perm))

    def ok(*acls: Binding) -> bool:
        return decide_any(acls, "User:a", "10.0.0.1", Operation.WRITE, ResourceType.TOPIC)

    assert ok(b("pay", PatternType.PREFIXED, Permission.ALLOW), b("pay", PatternType.LITERAL, Permission.DENY))
    assert not ok(b("pay", PatternType.LITERAL, Permission.ALLOW), b("pay", PatternType.LITERAL, Permission.DENY))
    assert not ok(
        b("payments", PatternType.PREFIXED, Permission.ALLOW), b("pay", PatternType.PREFIXED, Permission.DENY)
    )
    assert not ok(b("payments", PatternType.LITERAL, Permission.ALLOW), b("pay", PatternType.PREFIXED, Permission.DENY))
    assert ok(b("pay", PatternType.PREFIXED, Permission.ALLOW), b("payments", PatternType.PREFIXED, Permission.DENY))
    assert not ok(b("x", PatternType.LITERAL, Permission.ALLOW), b(WILDCARD, PatternType.LITERAL, Permission.DENY))
