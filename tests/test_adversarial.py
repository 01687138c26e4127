import torch

from qpr.research.adversarial import AdversarialConfig, reverse_gradient, train_adversarial
from qpr.model.encoder import EncoderConfig
from qpr.training.train import TrainConfig

SMALL = EncoderConfig(embedding_dim=32, channels=32, output_dim=16)
# A target domain written in other words and templates than the synthetic source clusters.
TARGET = [f"card {i} payment declined at shop {i % 7} why" for i in range(60)] + \
         [f"transfer of {i} pounds pending since {i % 5} days" for i in range(60)]


def test_gradient_reversal_is_identity_forward_and_negated_scaled_backward():
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = reverse_gradient(x, 0.5)
    assert torch.equal(y, x)
    (y * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.allclose(x.grad, torch.tensor([-0.5, -1.0, -1.5]))


def _train(corpus, weight):
    return train_adversarial(corpus, TARGET, TrainConfig(batch_size=16, max_epochs=6, patience=6, val_pairs=200, seed=0),
                             AdversarialConfig(weight=weight), encoder_config=SMALL)


def test_the_adversary_confuses_the_domain_classifier_and_the_source_task_is_still_learned(tiny_corpus):
    plain, adversarial = _train(tiny_corpus, 0.0), _train(tiny_corpus, 0.5)
    assert plain.best_auc > 0.9 and adversarial.best_auc > 0.85
    # Without the adversary the classifier tells the domains apart (0.85 in the last epoch); with it,
    # near or below chance (0.39): the encoder's vectors no longer show the domain.
    plain_acc = plain.history[-1]["domain_accuracy"]
    adv_acc = adversarial.history[-1]["domain_accuracy"]
    assert plain_acc > 0.8
    assert adv_acc < plain_acc - 0.2
    assert "card" in plain.vocab.tokens  # target words get vocabulary rows
