from reconbench_naive_attack import NaiveAttack

from reconbench import conformance


def test_naive_attack_conforms():
    conformance.check_attack(NaiveAttack())
