from reconbench import conformance
from reconbench_naive_attack import NaiveAttack


def test_naive_attack_conforms():
    conformance.check_attack(NaiveAttack())
