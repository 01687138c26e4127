"""Research protocols the product never calls: experiment arms, adversarial transfer, cluster quality, confidence intervals."""
